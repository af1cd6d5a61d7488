"""Metrics for Prometheus: ``dltop export --prometheus HOST:PORT SOURCE...``.

Why an exporter: the viewer follows at most 64 ranks, and a person watches one job at a
time; a cluster's dashboards and alerting already scrape Prometheus. One exporter per
node follows that node's rank files (a run folder is one SOURCE) with the viewer's own
readers and rules (``open_source``, ``RunModel``, ``JobView``: the same alerts, the same
verdict as ``dltop check``), and serves, at each scrape, the latest values per rank, the
alerts as 0/1 and the verdict (``tui/core/present/metrics.py``; the exposition is
``prometheus_client``'s, OpenMetrics when Prometheus asks for it). Prometheus scrapes the
nodes; docs/dev/architecture.md has the 1 000-rank picture, docs/live.md the details.

Bound to loopback unless told otherwise. A network address is allowed (that is how
Prometheus scrapes other nodes) but said on start: there is no token (Prometheus' own
scrape auth is the place for that), and the metrics carry run ids, losses and verdicts.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from . import thresholds_args
from .core.text.safetext import visible
from .serve_auth import BindError, parse_bind, url_host

EXIT_CANNOT = 3
DEFAULT_PORT = 9400
MAX_SOURCES = 64  # SOURCE arguments (each a reader, or a folder of readers)
USAGE_HINT = "usage: dltop export --prometheus HOST:PORT SOURCE... ; see --help"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="+",
        metavar="SOURCE",
        help="a .jsonl log (followed while it grows), a run folder of rank files (this "
        "node's ranks), or a live address unix:PATH / tcp://HOST:PORT",
    )
    parser.add_argument(
        "--prometheus",
        required=True,
        metavar="HOST:PORT",
        help=f"where Prometheus scrapes /metrics, e.g. 127.0.0.1:{DEFAULT_PORT}; a network "
        "address (0.0.0.0:9400) is allowed, and said",
    )
    parser.add_argument(
        "--job",
        metavar="NAME",
        help="the job label (default: the run folder's name, or the run id)",
    )
    thresholds_args.add_arguments(parser)


class ExportError(Exception):
    """Why nothing can be exported; one line with a hint."""


def _fail(message: object) -> int:
    print(f"dltop export: {visible(message)}", file=sys.stderr)
    return EXIT_CANNOT


def open_watch(spec: str, config: Any, job: str | None) -> Any:
    """One SOURCE followed live: its reader started, its ranks in a ``JobView``."""
    from .core.present import metrics
    from .core.present.rankjob import JobView
    from .core.ranks.jobs import RankLog
    from .core.sources.filesource import SourceError
    from .core.sources.socket_source import StreamError, redact
    from .core.sources.source_open import open_source
    from .core.store.run import RunModel

    model = RunModel(redact(spec), config)
    try:
        reader = open_source(spec, model, follow=True)  # follow: the files' readers
    except (SourceError, StreamError) as e:
        raise ExportError(str(e)) from None
    single = (RankLog(None, spec, model),)
    view = JobView(lambda: getattr(reader, "ranks", single))  # a folder: every rank
    reader.start()
    view.start()
    return metrics.Watched(spec, view, model, job or "")


def open_rank_files(paths: list[str], config: Any, job: str | None) -> Any:
    """Rank files of one folder named one by one (a node's share of a shared folder,
    ``rank{8..15}.jsonl``): one job, judged side by side like a folder."""
    from .core.present import metrics
    from .core.present.rankjob import JobView
    from .core.ranks.jobs import RANK_FILE, RankLog
    from .core.sources.filesource import FileSource, SourceError
    from .core.store.run import RunModel

    ranks = []
    for path in paths:
        model = RunModel(os.path.basename(path), config)
        try:
            reader = FileSource(path, model, follow=True)
        except SourceError as e:
            raise ExportError(str(e)) from None
        found = RANK_FILE.match(os.path.basename(path))
        ranks.append((RankLog(int(found.group(1)) if found else None, path, model), reader))
    held = tuple(sorted((r for r, _ in ranks), key=lambda r: (r.rank is None, r.rank or 0)))
    view = JobView(lambda: held)
    for _, reader in ranks:
        reader.start()
    view.start()
    folder = os.path.dirname(os.path.abspath(paths[0]))
    return metrics.Watched(folder, view, held[0].model, job or "")


def group_sources(specs: list[str]) -> list[str | list[str]]:
    """Each SOURCE alone, except rank files of one folder: together, as one job."""
    from .core.ranks.jobs import is_rank_file
    from .core.sources.socket_source import is_stream_spec

    out: list[str | list[str]] = []
    folders: dict[str, list[str]] = {}
    for spec in specs:
        if is_stream_spec(spec) or not is_rank_file(spec) or not os.path.isfile(spec):
            out.append(spec)
            continue
        folder = os.path.dirname(os.path.abspath(spec))
        if folder not in folders:
            folders[folder] = []
            out.append(folders[folder])
        folders[folder].append(spec)
    return out


class Collector:
    """``prometheus_client``'s side: our families in its types, built at each scrape."""

    def __init__(self, watched: list[Any]) -> None:
        self.watched = watched

    def describe(self) -> list[Any]:
        return []  # built at scrape time: nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            InfoMetricFamily,
            StateSetMetricFamily,
        )

        from .core.present import metrics

        for fam in metrics.collect(self.watched):
            if not fam.samples and fam.kind != "gauge":
                continue
            names = sorted({k for labels, _ in fam.samples for k in labels})
            out: Any
            if fam.kind == "counter":
                out = CounterMetricFamily(fam.name, fam.help, labels=names)
            elif fam.kind == "info":
                out = InfoMetricFamily(fam.name, fam.help, labels=["job", "run_id"])
            elif fam.kind == "stateset":
                out = StateSetMetricFamily(fam.name, fam.help, labels=names)
            else:
                out = GaugeMetricFamily(fam.name, fam.help, labels=names)
            for labels, value in fam.samples:
                if fam.kind == "info":
                    base = [labels["job"], labels["run_id"]]
                    out.add_metric(
                        base, {k: v for k, v in labels.items() if k not in ("job", "run_id")}
                    )
                else:
                    out.add_metric([labels.get(k, "") for k in names], value)
            yield out


def run(args: argparse.Namespace) -> int:
    from .core.rules import ConfigError

    try:
        host, port = parse_bind(args.prometheus, DEFAULT_PORT)
        if len(args.source) > MAX_SOURCES:
            raise ExportError(f"{len(args.source)} sources: at most {MAX_SOURCES} per exporter")
        config = thresholds_args.load(args)
        watched = [
            open_rank_files(group, config, args.job)
            if isinstance(group, list)
            else open_watch(group, config, args.job)
            for group in group_sources(args.source)
        ]
    except (BindError, ExportError) as e:
        return _fail(e)
    except ConfigError as e:
        return _fail(f"{e} (hint: {thresholds_args.HINT})")
    try:
        from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
    except ModuleNotFoundError:
        return _fail(
            "prometheus-client is not installed (hint: pip install 'dltop-monitor[prometheus]')"
        )
    registry = CollectorRegistry()
    registry.register(Collector(watched))
    ProcessCollector(registry=registry)  # the exporter's own CPU and memory
    try:
        httpd, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        return _fail(f"cannot listen on {args.prometheus}: {e.strerror or e} (hint: another port)")
    print(_start_line(host, httpd.server_port, watched), file=sys.stderr, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    httpd.shutdown()
    return 0


def _start_line(host: str, port: int, watched: list[Any]) -> str:
    from ..probe.viewerauth import is_loopback

    url = f"http://{url_host(host)}:{port}/metrics"
    ranks = sum(len(w.ranks()) for w in watched)
    what = f"{len(watched)} source{'s' if len(watched) != 1 else ''}, {ranks} rank file{'s' if ranks != 1 else ''} so far"
    if is_loopback(host):
        where = "this machine only"
    else:
        where = (
            "reachable from the network, no token: the metrics hold run ids, losses and "
            "verdicts; bind a private interface or firewall the port"
        )
    return f"dltop export: serving Prometheus metrics ({what}) on {url} ({where})"
