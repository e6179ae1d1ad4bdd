"""Screenshots of the MLflow UI for the docs, taken by headless Chromium (`make screenshots`).

It is the documented check that a sweep's experiment opens on its runs with the sweep's columns in
view and that an LLM retriever's query reads as a trace. It needs Playwright (`pip install
'.[docs]'`) and a Chromium (Debian: `apt-get install chromium`; or `playwright install chromium`).

    python docs/tools/mlflow_screenshots.py --runs work/sweeps/pq-demo \
        --trace work/sweeps/kb-pq-all --of spark:cypher dgr --to docs/img
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from sagegraph.tracking import VIEW_KEY, VIEW_TAG_PREFIX, default_tracking_uri, runs_view_url

VIEWPORT = {"width": 1600, "height": 900}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_ui(sweep_out: Path) -> Iterator[str]:
    """`mlflow ui` on the sweep's own tracking database, as the sweep's last lines tell a user."""
    uri = default_tracking_uri(sweep_out)
    port = _free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [str(mlflow), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    host = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{host}/health", timeout=2)
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"mlflow ui on {uri} did not answer in 120 s")
        yield host
    finally:
        # `mlflow ui` runs uvicorn with worker processes: stop the whole group, not just the parent
        os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        with contextlib.suppress(ProcessLookupError):  # a worker that outlived its parent
            os.killpg(proc.pid, signal.SIGKILL)


def _experiment(sweep_out: Path):
    from mlflow.tracking import MlflowClient

    state = json.loads((sweep_out / "mlflow_parent.json").read_text())
    client = MlflowClient(default_tracking_uri(sweep_out))
    return client, client.get_run(state["parent_run_id"]).info.experiment_id


# On a first visit the UI opens its assistant panel and a tip over the table; these are the
# localStorage entries it remembers them by (MLflow 3.x), set as a returning user has them.
_SEEN = {
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
    "mlflow.assistant.panelOpen_v1": "false",
    "mlflow.detectIssues.guidanceShown_v1": "true",
    "mlflow.flagForReview.guidanceShown_v1": "true",
}


def _page(browser):
    page = browser.new_page(viewport=VIEWPORT)
    page.add_init_script("".join(f"localStorage.setItem({k!r}, {v!r});" for k, v in _SEEN.items()))
    return page


def runs_view(browser, sweep_out: Path, to: Path, wait_ms: int) -> Path:
    client, exp = _experiment(sweep_out)
    if VIEW_TAG_PREFIX + VIEW_KEY not in client.get_experiment(exp).tags:
        raise SystemExit(f"{sweep_out}: the experiment has no shared view; run the sweep again with this version")
    with mlflow_ui(sweep_out) as host:
        page = _page(browser)
        page.goto(runs_view_url(exp, host))
        page.get_by_text("hit_at_1").first.wait_for(timeout=60_000)  # the view's columns, or the check fails
        page.wait_for_timeout(wait_ms)
        path = to / "mlflow-runs.png"
        page.screenshot(path=str(path))
        page.close()
    return path


def trace_view(browser, sweep_out: Path, retriever: str, span: str | None, to: Path, wait_ms: int) -> Path:
    client, exp = _experiment(sweep_out)
    runs = client.search_runs([exp], filter_string=f"tags.`sagegraph.retriever` = '{retriever}'", max_results=50)
    runs = sorted(runs, key=lambda r: sum(k.startswith("params.") for k in r.data.params))  # its defaults first
    keys = [r.data.tags["sagegraph.config_key"] for r in runs]
    trace = next(
        (
            t
            for k in keys
            for t in client.search_traces(
                locations=[exp], filter_string=f"tags.`sagegraph.config_key` = '{k}'", max_results=1
            )
        ),
        None,
    )
    if trace is None:
        raise SystemExit(f"{sweep_out}: no MLflow trace of a {retriever} run")
    with mlflow_ui(sweep_out) as host:
        page = _page(browser)
        page.goto(f"{host}/#/experiments/{exp}/traces?selectedEvaluationId={trace.info.trace_id}")
        page.get_by_text("Inputs / Outputs").first.wait_for(timeout=60_000)
        page.wait_for_timeout(wait_ms)
        if span:  # the span to show, e.g. the Cypher that ran after grounding
            page.get_by_text(span, exact=True).first.click(timeout=10_000)
            page.wait_for_timeout(1000)
        path = to / f"mlflow-trace-{retriever}.png"
        page.screenshot(path=str(path))
        page.close()
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, help="a sweep's out directory: its runs view")
    ap.add_argument("--trace", type=Path, help="a sweep's out directory with LLM retrievers: one query's trace")
    ap.add_argument(
        "--of",
        nargs="+",
        default=["spark:cypher"],
        metavar="RETRIEVER[:SPAN]",
        help="whose trace, and which of its spans to open (default: spark:cypher, the query that ran)",
    )
    ap.add_argument("--to", type=Path, default=Path("docs/img"))
    ap.add_argument(
        "--chromium",
        default=shutil.which("chromium") or shutil.which("chromium-browser"),
        help="browser binary (default: chromium on PATH, else Playwright's own)",
    )
    ap.add_argument("--wait-ms", type=int, default=4000, help="time for the page to finish rendering")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.to.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium) if args.chromium else pw.chromium.launch()
        try:
            if args.runs:
                print(runs_view(browser, args.runs, args.to, args.wait_ms))
            if args.trace:
                for of in args.of:
                    retriever, _, span = of.partition(":")
                    print(trace_view(browser, args.trace, retriever, span or None, args.to, args.wait_ms))
        finally:
            browser.close()


if __name__ == "__main__":
    main()
