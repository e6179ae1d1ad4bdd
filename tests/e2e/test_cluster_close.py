"""A worker that takes longer to exit than the nanny's own close allows is let exit, not killed."""

from __future__ import annotations

import logging


def _exit_slowly() -> None:
    """Run in a worker: its process, once asked to stop, takes 5 s more to exit (as a worker that
    held a large KB's tables does beside other work)."""
    import multiprocessing.util
    import time

    multiprocessing.util.Finalize(None, time.sleep, args=(5,), exitpriority=100)


def test_a_worker_slow_to_exit_is_waited_for_not_killed():
    from distributed import Client

    from sagegraph.flows.runtime import close_cluster, local_cluster

    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    nanny_log = logging.getLogger("distributed.nanny")
    nanny_log.addHandler(handler)
    try:
        cluster = local_cluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
        with Client(cluster) as client:
            client.run(_exit_slowly)
        (nanny,) = cluster.workers.values()
        process = nanny.process.process
        close_cluster(cluster)
    finally:
        nanny_log.removeHandler(handler)
    assert not [m for m in messages if "still alive" in m], messages
    assert process.exitcode == 0  # it exited on its own, after its 5 s
