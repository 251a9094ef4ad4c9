"""The lease metrics for ``prometheus_client`` (an optional dependency:
``pip install bucket-lease[prometheus]``)::

    from prometheus_client import REGISTRY, start_http_server
    from lease.prometheus import LeaseCollector

    REGISTRY.register(LeaseCollector())
    start_http_server(9464)

Every scrape reads :func:`lease.metrics` (the numbers the core keeps for every language) and
yields them as ``prometheus_client`` metric families, with the same names and labels as
``lease run --metrics`` serves.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

import lease

__all__ = ["LeaseCollector"]


def _le(bound: float) -> str:
    return repr(float(bound))


class LeaseCollector(Collector):
    """A ``prometheus_client`` collector of this process's lease metrics."""

    def collect(self) -> Iterator[Metric]:
        for f in lease.metrics():
            yield self._family(f)

    @staticmethod
    def _family(f: Dict[str, Any]) -> Metric:
        samples = f["samples"]
        names = sorted({k for s in samples for k in s["labels"]})
        kind = f["type"]
        labels = [[s["labels"][n] for n in names] for s in samples]
        if kind == "counter":
            # prometheus_client adds the _total suffix itself.
            counter = CounterMetricFamily(f["name"][: -len("_total")], f["help"], labels=names)
            for values, s in zip(labels, samples):
                counter.add_metric(values, s["value"])
            return counter
        if kind == "gauge":
            gauge = GaugeMetricFamily(f["name"], f["help"], labels=names)
            for values, s in zip(labels, samples):
                gauge.add_metric(values, s["value"])
            return gauge
        histogram = HistogramMetricFamily(f["name"], f["help"], labels=names)
        for values, s in zip(labels, samples):
            buckets = [(_le(le), n) for le, n in s["buckets"]] + [("+Inf", s["count"])]
            histogram.add_metric(values, buckets, s["sum"])
        return histogram
