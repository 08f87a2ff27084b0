"""A DataFrame, an array, a dict and a figure cross both ways in one click (or one command)
each, with their values intact, in a real ipykernel driven as JupyterLab drives it: the
offers' Take buttons, ``%agent pull`` and ``%agent push``. Nothing crosses back as a pickle
(tests/test_crossing.py has the attacks); these are the honest values that still must.
"""

from __future__ import annotations

import pytest

from tests.helpers.kernel_frontend import Frontend
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytestmark = pytest.mark.slow

MAKE = ("import numpy as np, pandas as pd\n"
        "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
        "df = pd.DataFrame({'month': ['jan', 'feb', None], 'revenue': [1.5, 2.25, 3.0]},"
        " index=pd.Index([1, 2, 3], name='id'))\n"
        "arr = np.arange(12, dtype='float32').reshape(3, 4) / 7\n"
        "d = {'slope': 2.5, 'pair': (1, 'a'), 'tags': {'x'}, 'raw': b'\\x00\\xff'}\n"
        "fig = plt.figure(figsize=(2, 1)); _ = plt.plot([1, 3, 2])")
NAMES = ("df", "arr", "d", "fig")
# The same values, built again in the user's kernel to compare with what arrived.
EXPECTED = MAKE.replace("df =", "df_want =").replace("arr =", "arr_want =").replace("d =", "d_want =")
SAME = {
    "df": "df.equals(df_want) and list(df.dtypes) == list(df_want.dtypes) and df.index.name == 'id'",
    "arr": "arr.dtype == arr_want.dtype and (arr == arr_want).all()",
    "d": "d == d_want and type(d['pair']) is tuple",
    "fig": "type(fig).__name__ == 'Image' and fig.data.startswith(b'\\x89PNG')",
}


@pytest.fixture(scope="module")
def fe(tmp_path_factory: pytest.TempPathFactory):
    frontend = Frontend(cwd=str(tmp_path_factory.mktemp("crossing")))
    loaded = frontend.run("%load_ext ipyagent\nimport ipyagent\n"
                          "%config Agent.share_namespace = 'off'\n"
                          "%config Agent.approval = 'auto'")
    assert loaded.reply["status"] == "ok", loaded.text()
    yield frontend
    frontend.close()


def scripted(fe: Frontend, srv: ScriptedServer) -> None:
    cell = fe.run(f"%config Agent.model = 'scripted'\n%config Agent.base_url = '{srv.base_url}'\n"
                  "%agent reset")
    assert cell.reply["status"] == "ok", cell.text()


def check(fe: Frontend, name: str) -> None:
    cell = fe.run(f"print(bool({SAME[name]}))")
    assert cell.text().strip() == "True", (name, cell.text())


def forget(fe: Frontend) -> None:
    fe.run("for _n in ('df', 'arr', 'd', 'fig'):\n    globals().pop(_n, None)")


def test_each_crosses_back_by_one_take_click(fe: Frontend) -> None:
    offers = [("offer_result", {"name": n, "description": f"the {n}"}) for n in NAMES]
    with ScriptedServer([reply_tool_calls([("python", {"code": MAKE}), *offers]),
                         reply_text("They are yours.")]) as srv:
        scripted(fe, srv)
        assert fe.run(EXPECTED).reply["status"] == "ok"
        forget(fe)
        cell = fe.execute("%agent make them")
        for name in NAMES:
            fe.click(fe.wait_for_button(f"Take {name} into my kernel"))
        fe.pump_until(lambda: cell.done, 120)
        assert cell.reply["status"] == "ok", cell.text()
    for name in NAMES:
        check(fe, name)


def test_each_crosses_back_by_one_pull_command(fe: Frontend) -> None:
    forget(fe)
    for name in NAMES:
        cell = fe.run(f"%agent pull {name}")
        assert cell.reply["status"] == "ok" and "a copy from the agent's kernel" in cell.text(), cell.text()
        check(fe, name)


def test_each_crosses_in_by_one_push_command(fe: Frontend) -> None:
    fe.run("import matplotlib; matplotlib.use('Agg')\n" + EXPECTED.replace("_want =", " =")
           .replace("df_want", "df").replace("arr_want", "arr").replace("d_want", "d"))
    fe.run("ipyagent.current().kernel.execute('del df, arr, d, fig')")
    for name in NAMES:
        cell = fe.run(f"%agent push {name}")
        assert cell.reply["status"] == "ok" and "into the agent's kernel" in cell.text(), cell.text()
    there = ("print(df['revenue'].sum(), arr.shape, arr.dtype, d['pair'], type(fig).__name__, "
             "len(fig.axes[0].lines))")
    cell = fe.run(f"print(ipyagent.current().kernel.execute({there!r}).text)")
    assert cell.text().strip() == "6.75 (3, 4) float32 (1, 'a') Figure 1", cell.text()
