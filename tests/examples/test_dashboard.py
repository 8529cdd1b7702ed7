"""The example Grafana dashboard (examples/gpu_server/grafana-specfsm.json) names only series a
live server exports: those the live-server metrics test finds on /metrics
(tests/engine/test_metrics_live.py, LIVE_SERIES) or that SGLang's metrics collector defines."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "examples" / "gpu_server" / "grafana-specfsm.json"
#: SGLang's scheduler labels, the ones a join may name (observability/metrics_collector.py)
JOIN_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"}
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def live_series() -> frozenset[str]:
    """LIVE_SERIES of the live-server test, loaded from its file (no engine is started)."""
    path = ROOT / "tests" / "engine" / "test_metrics_live.py"
    spec = importlib.util.spec_from_file_location("_metrics_live", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return frozenset(mod.LIVE_SERIES)


def sglang_defined() -> set[str]:
    """Series names SGLang 0.5.23's metrics collector defines (counters with _total)."""
    sglang = pytest.importorskip("sglang")
    src = Path(sglang.__file__).parent / "srt" / "observability" / "metrics_collector.py"
    names = set(re.findall(r'name="(sglang:[a-z0-9_]+)"', src.read_text()))
    return names | {n + "_total" for n in names if not n.endswith("_total")}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: label matchers, ranges, strings and grouping label
    lists removed; what is left that is not a function call or keyword."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" ", e)
    names = set()
    for m in _NAME.finditer(e):
        word = m.group(0)
        rest = e[m.end() :].lstrip()
        if word in _KEYWORDS or rest.startswith("(") or word.startswith("$"):
            continue
        if e[m.start() - 1 : m.start()] == "$":
            continue
        names.add(word)
    return names


def expressions(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            exprs.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", q["query"]))
    return exprs


def test_dashboard_names_only_exported_series() -> None:
    """Every PromQL expression of the dashboard names series the live test saw or SGLang
    defines; it shows each specfsm series and joins SGLang's accept length and running
    requests on SGLang's labels only."""
    dash = json.loads(DASHBOARD.read_text())
    live = live_series()
    allowed = live | sglang_defined()
    used: set[str] = set()
    for expr in expressions(dash):
        names = metric_names(expr)
        assert names, expr
        assert names <= allowed, (sorted(names - allowed), expr)
        used |= names
        for labels in re.findall(r"\bon\s*\(([^)]*)\)", expr):
            assert {x.strip() for x in labels.split(",")} <= JOIN_LABELS, expr
    specfsm = {n for n in live if n.startswith("specfsm_")}
    assert specfsm <= used, sorted(specfsm - used)
    assert {"sglang:spec_accept_length", "sglang:num_running_reqs"} <= used
    assert {n for n in used if n.startswith("sglang:")} <= live  # scraped, not only defined


def test_metric_names_parser() -> None:
    """The PromQL name extraction skips functions, matchers, ranges and grouping labels."""
    expr = (
        'sum by (mode) (rate(specfsm_x_total{a=~"$v", b="c{d}"}[$__rate_interval])) '
        "* on(tp_rank) group_left(mode) (sglang:y == 1)"
    )
    assert metric_names(expr) == {"specfsm_x_total", "sglang:y"}


#: a real server's /metrics on the H200, scraped after a serving run (specfsm, goodput policy)
H200_SCRAPE = (
    ROOT / "benchmarks" / "gpu" / "results" / "2026-12-02_serving_deferred" / "metrics_specfsm.txt"
)
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(text: str) -> dict[str, list[dict[str, str]]]:
    """Prometheus text exposition: each series name with the label sets of its samples."""
    out: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m is not None, line
        out.setdefault(m.group(1), []).append(dict(_LABEL.findall(m.group(2) or "")))
    return out


def test_dashboard_queries_find_data_on_the_h200_scrape() -> None:
    """Against /metrics of a real specfsm server on the H200: every series a panel names has
    samples, every equality matcher (mode="SPECULATING") matches one, and the series a join
    combines share one set of SGLang's scheduler labels, so each query returns data."""
    series = scrape(H200_SCRAPE.read_text())
    dash = json.loads(DASHBOARD.read_text())
    for expr in expressions(dash):
        names = metric_names(expr)
        assert names <= series.keys(), (sorted(names - series.keys()), expr)
        for name, body in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", expr):
            fixed = dict(re.findall(r'(\w+)="([^"$]*)"', body))
            if name in names and fixed:
                assert any(fixed.items() <= s.items() for s in series[name]), (name, fixed)
        if re.search(r"\bon\s*\(", expr):
            keys = [
                {tuple(s.get(k, "") for k in sorted(JOIN_LABELS)) for s in series[n]} for n in names
            ]
            assert set.intersection(*keys), expr
