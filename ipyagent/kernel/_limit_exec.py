"""Set the sibling kernel's resource limits, then exec its command (run as a script).

``python -I -S _limit_exec.py [--as N] [--cpu N] [--nproc N] [--cgroup DIR] -- CMD...``
Standalone on purpose: it imports nothing of ipyagent, so it starts in milliseconds.
"""

import os
import resource
import sys


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, cmd = argv[:split], argv[split + 1:]
    values = dict(zip(options[::2], options[1::2]))
    if "--cgroup" in values:
        # Root is exempt from RLIMIT_NPROC: a pids cgroup is what stops its fork loop.
        with open(os.path.join(values["--cgroup"], "cgroup.procs"), "w") as f:
            f.write("0")
    if "--nproc" in values:
        n = int(values["--nproc"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    if "--as" in values:
        n = int(values["--as"])
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    if "--cpu" in values:
        n = int(values["--cpu"])
        # hard > soft, so SIGXCPU (which says why) arrives before the kernel's SIGKILL.
        resource.setrlimit(resource.RLIMIT_CPU, (n, n + 1))
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
