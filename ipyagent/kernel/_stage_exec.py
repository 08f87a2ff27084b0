"""Put a command in the staged workspace's namespaces, then exec it (run as a script).

Start: ``python -I -S _stage_exec.py --pidfile F [--net slirp4netns PATH]
[--overlay TARGET LOWERBIND UPPER WORK]... -- CMD...``
makes a user namespace (the caller's uid mapped to itself), a mount namespace and a
network namespace; mounts each TARGET as an overlay whose lower layer is TARGET itself
(bound first to LOWERBIND, a path of ours, so no user path goes into mount options) and
whose upper layer UPPER collects every write; optionally starts a user-mode network stack
(its own process, outside, without the host's loopback) for the new network namespace;
writes the pid whose namespaces these are to F; then execs CMD (bubblewrap).

Join: ``python -I -S _stage_exec.py --join PID --expect-mnt INODE [--expect-overlay
TARGET UPPER]... --cwd DIR -- CMD...`` enters the user, mount and network namespaces of
PID (checked to be the stage made for us: its mount namespace's inode, and each TARGET
an overlay on our UPPER there) and execs CMD there: a fresh process (the shell tool's)
that sees the same staged workspace as the sibling kernel.

Standalone on purpose (standard library, ctypes): it starts in milliseconds and imports
nothing of ipyagent.
"""

import ctypes
import fcntl
import os
import re
import signal
import socket
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                       ctypes.c_ulong(flags), data.encode() if data else None),
           f"mount {fstype or 'bind'} on {target}")


def _loopback_up() -> None:
    """``ip link set lo up`` in the new network namespace (SIOCSIFFLAGS, IFF_UP)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s.fileno(), 0x8913, ifr))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sh", b"lo", flags | 1))  # SIOCSIFFLAGS
    finally:
        s.close()


def _enter_stage(overlays: list[list[str]]) -> None:
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    for target, lowerbind, upper, work in overlays:
        _mount(target, lowerbind, None, MS_BIND | MS_REC, None)
        # Read-only: the overlay only reads its lower layer, and this bind of the real folder
        # must never be a way to write it (were the stage's folder ever in a sandbox's view).
        _mount("none", lowerbind, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        _mount("overlay", target, "overlay", 0,
               f"lowerdir={lowerbind},upperdir={upper},workdir={work},userxattr")
    _loopback_up()


def _start_network(kind: str, path: str, pid: int) -> int:
    """slirp4netns (no host loopback) for ``pid``'s network namespace; its pid once ready."""
    ready_r, ready_w = os.pipe()
    os.set_inheritable(ready_w, True)  # slirp4netns writes "1" to it once configured
    cmd = [path, "--configure", "--mtu=65520", "--disable-host-loopback",
           f"--ready-fd={ready_w}", str(pid), "tap0"]
    child = os.fork()
    if child == 0:
        try:
            os.close(ready_r)
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # it goes with the stage
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # its chatter would flood the kernel's log
                os.dup2(devnull, fd)
            os.execv(path, cmd)
        finally:
            os._exit(127)
    os.close(ready_w)
    if os.read(ready_r, 1) != b"1":  # "1" once the interface is configured, EOF if it failed
        raise OSError(0, f"{kind} did not configure the sandbox's network")
    os.close(ready_r)
    return child


def _start(args: dict[str, list[str]], overlays: list[list[str]], cmd: list[str]) -> None:
    pidfile = args["--pidfile"][0]
    net = args.get("--net")
    if net is None:
        _enter_stage(overlays)
        _write(pidfile, str(os.getpid()))
        os.execvp(cmd[0], cmd)
    # With a network stack the stack runs outside (here) and the command inside (the child).
    unshared_r, unshared_w = os.pipe()
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(unshared_r)
            os.close(go_w)
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            _enter_stage(overlays)
            os.write(unshared_w, b"1")
            if os.read(go_r, 1) != b"1":
                os._exit(1)
            _write(pidfile, str(os.getpid()))
            os.execvp(cmd[0], cmd)
        except BaseException as exc:  # noqa: BLE001 - say why, then end the child
            print(f"ipyagent stage: {exc}", file=sys.stderr, flush=True)
        os._exit(126)
    os.close(unshared_w)
    os.close(go_r)
    stack = None
    if os.read(unshared_r, 1) == b"1":
        try:
            stack = _start_network(net[0], net[1], child)
            os.write(go_w, b"1")
        except OSError as exc:
            print(f"ipyagent stage: the network stack did not start: {exc}", file=sys.stderr, flush=True)
    os.close(go_w)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    if stack is not None:
        try:
            os.kill(stack, signal.SIGKILL)
            os.waitpid(stack, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    # The command's own exit status: a signal N becomes 128+N, as bubblewrap says it.
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _unescape(field: str) -> str:
    """A mountinfo field: space, tab, newline and backslash are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _our_overlays(overlays: list[list[str]]) -> bool:
    """True when, in the mount namespace we are in, each TARGET is an overlay whose upper
    directory is UPPER: the stage made for us, not whatever process now has its pid."""
    mounts: dict[str, str] = {}
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, extra = left.split(), right.split()
            if len(fields) >= 5 and len(extra) >= 3 and extra[0] == "overlay":
                mounts[_unescape(fields[4])] = _unescape(extra[2])  # the last mount on a point wins
    for target, upper in overlays:
        options = mounts.get(target, "")
        if f"upperdir={upper}," not in options + ",":
            return False
    return True


def _join(args: dict[str, list[str]], overlays: list[list[str]], cmd: list[str]) -> None:
    pid = int(args["--join"][0])
    expected = int(args["--expect-mnt"][0])
    fds = {kind: os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY) for kind in ("user", "mnt", "net")}
    if os.fstat(fds["mnt"]).st_ino != expected:
        print("ipyagent stage: the staged workspace is gone (its process ended)", file=sys.stderr)
        os._exit(125)
    for kind, flag in (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET)):
        _check(_libc.setns(fds[kind], flag), f"setns {kind}")
        os.close(fds[kind])
    if not _our_overlays(overlays):
        # A pid reused by another sandbox: its namespaces have no overlay of ours, so the
        # folders would be bound as they are (writes straight into them). Refuse.
        print("ipyagent stage: the staged workspace is gone (its pid now names another "
              "process)", file=sys.stderr)
        os._exit(125)
    os.chdir(args["--cwd"][0])
    os.execvp(cmd[0], cmd)


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, cmd = argv[:split], argv[split + 1:]
    args: dict[str, list[str]] = {}
    overlays: list[list[str]] = []
    i = 0
    while i < len(options):
        flag = options[i]
        width = {"--overlay": 4, "--net": 2, "--expect-overlay": 2}.get(flag, 1)
        values = options[i + 1: i + 1 + width]
        if flag in ("--overlay", "--expect-overlay"):
            overlays.append(values)
        else:
            args[flag] = values
        i += 1 + width
    try:
        if "--join" in args:
            _join(args, overlays, cmd)
        else:
            _start(args, overlays, cmd)
    except OSError as exc:
        print(f"ipyagent stage: {exc}", file=sys.stderr, flush=True)
        os._exit(126)


if __name__ == "__main__":
    main(sys.argv[1:])
