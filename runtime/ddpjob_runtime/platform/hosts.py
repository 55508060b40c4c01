"""Where the rendezvous is: platform.json's addresses, else DNS retried like the toolkit."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from ddpjob_runtime.platform.environment import TrainingEnvironment
from ddpjob_runtime.shared.errors import RuntimeContractError

log = logging.getLogger(__name__)

DEFAULT_MASTER_PORT = 7777
# The toolkit's retry: exponential from 100 ms, at most 30 s apart, for up to 15 minutes.
DNS_FIRST_WAIT_S, DNS_MAX_WAIT_S, DNS_DEADLINE_S = 0.1, 30.0, 15 * 60.0


def resolve(
    host: str,
    deadline_s: float = DNS_DEADLINE_S,
    lookup: Callable[[str], str] = socket.gethostbyname,
) -> str:
    """The host's address; cluster hosts appear in DNS late, so retry with backoff."""
    start, wait = time.monotonic(), DNS_FIRST_WAIT_S
    while True:
        try:
            return lookup(host)
        except OSError as exc:
            if time.monotonic() - start + wait > deadline_s:
                raise RuntimeContractError(
                    f"host {host!r} did not resolve within {deadline_s:.0f} s ({exc})"
                ) from None
            log.info("waiting for host %s to resolve (%s)", host, exc)
            time.sleep(wait)
            wait = min(wait * 2, DNS_MAX_WAIT_S)


def host_address(env: TrainingEnvironment, host: str) -> str:
    """`host`'s address: platform.json's `host_addresses` when it names it, else DNS."""
    return env.platform.host_addresses.get(host) or resolve(host)


def master_address(env: TrainingEnvironment) -> tuple[str, int]:
    """(address, port) of the first host, where torchrun's rendezvous store listens."""
    return host_address(env, env.hosts[0]), _master_port(env)


def master_name(env: TrainingEnvironment) -> tuple[str, int]:
    """(name, port) of the first host, as SageMaker's PyTorch container exports them for every
    job (MASTER_ADDR is the name: no DNS wait); platform.json's address where it gives one."""
    first = env.hosts[0]
    return env.platform.host_addresses.get(first) or first, _master_port(env)


def _master_port(env: TrainingEnvironment) -> int:
    return env.platform.master_port or DEFAULT_MASTER_PORT
