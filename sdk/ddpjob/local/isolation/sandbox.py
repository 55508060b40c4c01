"""One local host's own `/opt/ml`: a Linux mount namespace around the host's process tree.

`wrap(command, ...)` returns a command that runs `python sandbox.py ... -- command`: this file,
run by path (standard library only, and without `site`, argparse, pathlib, typing or
subprocess: it starts in a third of the time, once per host of every job), enters a new mount
namespace, sets it up and `execvp`s the host's command (same pid: the supervisor signals and
waits for it as before). In the namespace:

- mount propagation is private first (`MS_REC|MS_PRIVATE` on `/`): nothing done here is seen in
  the machine's namespace, and the namespace (with its mounts) ends with its last process;
- `/opt/ml` is the host's folder (a recursive bind). Where the machine has no `/opt/ml`, a mount
  point is made without writing the machine's `/opt`: `/opt` is *shadowed* by a tmpfs holding
  one bind of each of its entries (symlinks copied), plus the empty `ml` folder; the tmpfs is then
  made read-only. Unlike an overlay of `/opt` this needs no upper folder on a file system that
  supports one, keeps the mounts below `/opt`, and writes nothing anywhere;
- `/etc/hosts` is the job's own file (the machine's lines, then `algo-N` -> `127.0.0.N`), so the
  host names resolve as on SageMaker; the network namespace stays the machine's (loopback);
- paths of `read_only` are bound read-only onto themselves, paths of `writable` stay writable
  inside them, `views` bind a folder read-only at another place (a staged channel at
  `input/data/<channel>`) and `writable_views` one writable (a warm pool's cache at
  `sagemaker/warmpoolcache`), all deepest first; then each path of `hidden` is covered by an
  empty read-only tmpfs (the warm pools' folder: a host sees its own pool cache only where it
  was bound above, and no pool's by its real path). A read-only mount refuses `chmod` and
  writes through the names below it only: another name of the same file (a hard link)
  elsewhere stays writable, so the caller makes read-only every folder where a name of a
  shared file lives (the job folders and the object cache).

Who may do this: root (with CAP_SYS_ADMIN) unshares the mount namespace alone; any other user
gets a user namespace too, where its own uid and gid map to themselves (so files keep their
owners and the host's processes hold no capability once the command is executed). Before the
command the host gives up what the caller names (`--give-up`, from `capabilities.given_up`: a
root host CAP_SYS_ADMIN, so that it can neither unmount nor remount what protects the others).
The host still shares the machine's pid namespace and user: this keeps mistakes of a script
from reaching other hosts, the cache or later jobs; it is no jail for a script that sets out
to escape (e.g. through `/proc/<pid>/root` of a process outside).

`available()` says whether this works here (a probe process tries it once); where it does not
(not Linux, a kernel or container that forbids namespaces, `DDPJOB_HOST_NAMESPACES=0`) the
caller keeps the plain folders and says so.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable, Mapping, Sequence

SWITCH_ENV = "DDPJOB_HOST_NAMESPACES"
OPT_ML = "/opt/ml"
ETC_HOSTS = "/etc/hosts"
SETUP_FAILED = 125  # the exit code when the namespace could not be set up (as `env`, `docker run`)
PROBE_TIMEOUT_S = 30

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME = 0x20, 0x400, 0x800
_MS_BIND, _MS_REC, _MS_PRIVATE, _MS_RELATIME = 0x1000, 0x4000, 0x40000, 0x200000
# What a read-only remount must keep of the mount's flags (a user namespace locks them).
_KEPT_FLAGS = {os.ST_NOSUID: _MS_NOSUID, os.ST_NODEV: _MS_NODEV, os.ST_NOEXEC: _MS_NOEXEC,
               os.ST_NOATIME: _MS_NOATIME, os.ST_NODIRATIME: _MS_NODIRATIME,
               os.ST_RELATIME: _MS_RELATIME} if sys.platform.startswith("linux") else {}
_PR_CAPBSET_DROP, CAP_SYS_ADMIN, _CAP_LAST = 24, 21, 63
_OFF = ("0", "false", "no", "off")
PathLike = str | os.PathLike  # a path (pathlib's import would slow every host's start)


class SandboxError(Exception):
    """The namespace could not be set up (one line: what and why)."""


# ------------------------------------------------------------------ the caller's side

_probed: dict[str, str | None] = {}  # the probe's answer, once asked


def available() -> str | None:
    """None when hosts can run in their own mount namespace here, else the one-line reason."""
    switch = os.environ.get(SWITCH_ENV, "").strip()
    if switch.lower() in _OFF:
        return f"{SWITCH_ENV}={switch} turns them off"
    if not sys.platform.startswith("linux"):
        return f"{sys.platform} has no Linux mount namespaces"
    if "answer" not in _probed:
        _probed["answer"] = _probe()
    return _probed["answer"]


def _probe() -> str | None:
    """Try the namespace in a child process (the checks `main` makes, the same calls)."""
    import subprocess  # the caller's side only

    try:
        done = subprocess.run(
            [*_interpreter(), "--probe"],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the namespace probe could not run ({exc})"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"the namespace probe exited with code {done.returncode}"


def wrap(
    command: Sequence[str], *, root: PathLike, read_only: Sequence[PathLike], hosts_file: PathLike,
    writable: Sequence[PathLike] = (), views: Mapping[PathLike, PathLike] | None = None,
    writable_views: Mapping[PathLike, PathLike] | None = None, hidden: Sequence[PathLike] = (),
    give_up: Iterable[int] = (),
) -> list[str]:  # fmt: skip
    """The command that runs `command` in a mount namespace where `/opt/ml` is `root`,
    `/etc/hosts` is `hosts_file`, the `read_only` paths are read-only but for the `writable`
    paths inside them, each `views` target shows its source folder read-only, each
    `writable_views` target its source folder writable, and each `hidden` folder is empty;
    the capabilities `give_up` (numbers) are out of its bounding set."""
    args = [*_interpreter(), "--root", str(root), "--hosts-file", str(hosts_file)]
    for cap in sorted(give_up):
        args += ["--give-up", str(cap)]
    for flag, paths in (("--read-only", read_only), ("--writable", writable),
                        ("--hidden", hidden)):
        for path in paths:
            args += [flag, str(path)]
    for flag, mapping in (("--view", views), ("--writable-view", writable_views)):
        for target, source in (mapping or {}).items():
            args += [flag, str(target), str(source)]
    return [*args, "--", *command]


def _interpreter() -> list[str]:
    """This file run by path in an isolated interpreter without `site` (it needs neither)."""
    return [sys.executable, "-I", "-S", os.path.realpath(__file__)]


def hosts_file_text(addresses: Mapping[str, str], machine_hosts: PathLike = ETC_HOSTS) -> str:
    """An `/etc/hosts` for a job: the machine's lines (localhost, its own name) but those naming
    one of the job's hosts (the first match wins), then one line per host (`{name: address}`)."""
    try:
        with open(machine_hosts) as machine_file:
            machine = machine_file.read().splitlines()
    except OSError:
        machine = ["127.0.0.1 localhost"]
    kept = [line for line in machine
            if not set(line.split("#", 1)[0].split()[1:]) & set(addresses)]
    ours = [f"{address} {name}" for name, address in addresses.items()]
    return "\n".join([*kept, "# the hosts of this ddpjob job", *ours, ""])


def inside(root: PathLike) -> bool:
    """Whether this process sees `root` as `/opt/ml` (it runs in a host's namespace)."""
    try:
        return os.path.samefile(OPT_ML, root)
    except OSError:
        return False


# ------------------------------------------------------------------ inside the namespace

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _call(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def c(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    _call(_libc.mount(c(source), c(target), c(fstype), ctypes.c_ulong(flags), c(data)),
          f"mount {source or ''} on {target}")


def held(cap: int, status: str = "/proc/self/status") -> bool:
    """Whether this process holds capability `cap` (its effective set; False without /proc)."""
    try:
        with open(status) as lines:
            eff = next((line for line in lines if line.startswith("CapEff:")), "CapEff: 0")
    except OSError:
        return False
    return bool(int(eff.split()[1], 16) >> cap & 1)


def _enter_namespace() -> None:
    """A new mount namespace (in a new user namespace unless we may mount here), private."""
    if held(CAP_SYS_ADMIN):
        _call(_libc.unshare(_CLONE_NEWNS), "unshare a mount namespace")
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        return
    uid, gid = os.getuid(), os.getgid()
    try:
        _call(_libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    except (SandboxError, OSError) as exc:  # e.g. a kernel, AppArmor or seccomp forbids them
        raise SandboxError(f"unprivileged user namespaces are not usable here ({exc})") from None


def _bind(source: str, target: str, read_only: bool) -> None:
    """Bind `source` (with the mounts below it) at `target`, read-only if asked."""
    _mount(source, target, None, _MS_BIND | _MS_REC)
    if read_only:
        kept = os.statvfs(target).f_flag
        flags = sum(bit for st, bit in _KEPT_FLAGS.items() if kept & st)
        _mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | flags)


def _shadow(folder: str) -> None:
    """Cover `folder` with a tmpfs showing the same entries (one bind each), where new mount
    points can be made without writing the machine's folder."""
    fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
    try:
        names = sorted(os.listdir(folder))
        mode = os.stat(folder).st_mode & 0o7777
        _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={mode:o}")
        for name in names:
            source, dest = f"/proc/self/fd/{fd}/{name}", os.path.join(folder, name)
            if os.path.islink(source):
                os.symlink(os.readlink(source), dest)
                continue
            if os.path.isdir(source):
                os.mkdir(dest)
            else:
                os.close(os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            _bind(source, dest, read_only=False)
    finally:
        os.close(fd)


def _mount_point(path: str, is_dir: bool, shadows: list[str], made: set[str]) -> None:
    """Make `path` exist in this namespace only: inside a folder shadowed by a tmpfs (shadowed
    here if needed, then added to `shadows`), never in the machine's folders."""
    if os.path.lexists(path):
        return
    parent = os.path.dirname(path)
    if parent == "/":
        raise SandboxError(f"{path} does not exist on this machine and / cannot be shadowed")
    _mount_point(parent, True, shadows, made)
    if parent not in shadows and parent not in made:
        _shadow(parent)
        shadows.append(parent)
    if is_dir:
        os.mkdir(path)
        made.add(path)
    else:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))


def _existing(path: str, what: str) -> str:
    real = os.path.realpath(path)
    if not os.path.isabs(path) or not os.path.exists(real):
        raise SandboxError(f"{what} {path!r} must be an existing absolute path")
    return real


def set_up(root: str, hosts_file: str, read_only: Sequence[str], writable: Sequence[str],
           views: Sequence[tuple[str, str]], writable_views: Sequence[tuple[str, str]] = (),
           hidden: Sequence[str] = (), give_up: Sequence[int] = ()) -> None:
    """Enter the host's namespace, mount everything (see the module's docstring), then give up
    the capabilities `give_up`."""
    binds = [(_existing(p, "read-only path"),) * 2 + (True,) for p in read_only]
    binds += [(_existing(p, "writable path"),) * 2 + (False,) for p in writable]
    binds += [(_existing(s, "view source"), _existing(t, "view target"), True) for t, s in views]
    binds += [(_existing(s, "view source"), _existing(t, "view target"), False)
              for t, s in writable_views]
    root, hosts_file = _existing(root, "root"), _existing(hosts_file, "hosts file")
    covered = [_existing(p, "hidden path") for p in hidden]
    _enter_namespace()
    for source, target, ro in sorted(binds, key=lambda b: -b[1].count("/")):  # deepest first
        _bind(source, target, ro)
    for folder in covered:  # after the binds: those of sources below it are made already
        _mount("tmpfs", folder, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "mode=0")
    shadows: list[str] = []
    made: set[str] = set()
    _mount_point(ETC_HOSTS, False, shadows, made)
    _bind(hosts_file, ETC_HOSTS, read_only=True)
    _mount_point(OPT_ML, True, shadows, made)
    _bind(root, OPT_ML, read_only=False)
    for folder in shadows:  # read-only, as the machine's folder is to the host's processes
        _seal(folder)
    _give_up(give_up)


def _seal(tmpfs: str) -> None:
    _mount(None, tmpfs, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _give_up(caps: Sequence[int]) -> None:
    """Take `caps` out of the bounding set: the command executed next holds none of them."""
    for cap in caps:
        _call(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0),
              f"give up capability {cap} (drop it from the bounding set)")


def _probe_here() -> None:
    """What `available()` runs: the namespace and the kinds of mount `set_up` makes."""
    _enter_namespace()
    here = os.path.dirname(os.path.realpath(__file__))
    _bind(here, here, read_only=True)
    _mount("tmpfs", here, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755")
    _seal(here)
    if not (os.path.lexists(OPT_ML) or os.path.isdir(os.path.dirname(OPT_ML))):
        raise SandboxError(f"this machine has neither {OPT_ML} nor {os.path.dirname(OPT_ML)}")
    if os.geteuid() == 0:  # a root host is asked to give up capabilities: check that it may
        _give_up([CAP_SYS_ADMIN])


_LISTED = {"--read-only": "read_only", "--writable": "writable", "--hidden": "hidden",
           "--give-up": "give_up"}
_SINGLE = {"--root": "root", "--hosts-file": "hosts_file"}
_VIEWS = {"--view": "view", "--writable-view": "writable_view"}


def _parse(argv: list[str]) -> dict:
    """`wrap`'s options and the command after `--` (by hand: argparse's imports would double
    this file's start)."""
    args: dict = {"probe": False, "root": None, "hosts_file": None, "read_only": [],
                  "writable": [], "hidden": [], "view": [], "writable_view": [],
                  "give_up": [], "command": []}
    rest = list(argv)
    while rest:
        flag = rest.pop(0)
        wanted = 2 if flag in _VIEWS else 1 if flag in _LISTED or flag in _SINGLE else 0
        if len(rest) < wanted:
            _usage(f"{flag} needs {wanted} value(s)")
        if flag == "--":
            args["command"] = rest
            break
        if flag == "--probe":
            args["probe"] = True
        elif flag in _SINGLE:
            args[_SINGLE[flag]] = rest.pop(0)
        elif flag in _LISTED:
            args[_LISTED[flag]].append(rest.pop(0))
        elif flag in _VIEWS:
            args[_VIEWS[flag]].append((rest.pop(0), rest.pop(0)))
        else:
            _usage(f"unknown argument {flag!r}")
    bad = [value for value in args["give_up"] if not (value.isdigit() and int(value) <= _CAP_LAST)]
    if bad:
        _usage(f"--give-up {bad[0]!r}: a capability's number (0 to {_CAP_LAST}) is allowed")
    args["give_up"] = [int(value) for value in args["give_up"]]
    return args


def _usage(message: str) -> None:
    print("usage: sandbox.py (--probe | --root R --hosts-file F [--read-only P]... "
          "[--writable P]... [--hidden P]... [--view TARGET SOURCE]... "
          "[--writable-view TARGET SOURCE]... [--give-up CAP]... "
          f"-- COMMAND...)\nsandbox.py: {message}",
          file=sys.stderr)
    sys.exit(2)


def _fail(root: str | None, message: str) -> None:
    """One line on stderr (the host's log) and in the host's `output/failure`; exit 125."""
    line = f"{os.path.basename(root or '') or 'host'}: {message}"
    print(f"ddpjob.local.isolation.sandbox: {line}", file=sys.stderr, flush=True)
    if root and os.path.isdir(root):
        try:  # noqa: SIM105 - contextlib's imports would slow every host's start
            os.makedirs(os.path.join(root, "output"), exist_ok=True)
            with open(os.path.join(root, "output", "failure"), "w") as f:
                f.write(line)
        except OSError:
            pass
    sys.exit(SETUP_FAILED)


def main(argv: list[str] | None = None) -> None:
    """`python sandbox.py --root R --hosts-file F [--read-only P]... -- COMMAND...`."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args["probe"]:
        try:
            _probe_here()
        except (SandboxError, OSError) as exc:
            sys.exit(str(exc))
        return
    root, command = args["root"], args["command"]
    if not (root and args["hosts_file"] and command):
        _usage("--root, --hosts-file and a command after -- are required")
    try:
        set_up(root, args["hosts_file"], args["read_only"], args["writable"], args["view"],
               args["writable_view"], args["hidden"], args["give_up"])
        os.chdir(OPT_ML)
    except (SandboxError, OSError) as exc:
        _fail(root, f"cannot give the host its own {OPT_ML}: {exc}")
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        _fail(root, f"cannot run {command[0]}: {exc.strerror}")


if __name__ == "__main__":
    main()
