'use strict';
// The lease metrics for prom-client (an optional peer dependency):
//
//   const client = require('prom-client');
//   require('bucket-lease/prometheus').register(client.register);
//
// Each metric family of `lease.metrics()` (the numbers the core keeps for every language)
// becomes a metric of the registry, read afresh at every scrape, with the names and labels
// `lease run --metrics` serves.

const lease = require('./index.js');

function family(name) {
  return lease.metrics().find((f) => f.name === name);
}

function values(f) {
  const out = [];
  for (const s of f.samples) {
    if (f.type !== 'histogram') {
      out.push({ value: s.value, labels: s.labels });
      continue;
    }
    for (const [le, count] of s.buckets) {
      out.push({ metricName: `${f.name}_bucket`, value: count, labels: { ...s.labels, le } });
    }
    out.push({ metricName: `${f.name}_bucket`, value: s.count, labels: { ...s.labels, le: '+Inf' } });
    out.push({ metricName: `${f.name}_sum`, value: s.sum, labels: s.labels });
    out.push({ metricName: `${f.name}_count`, value: s.count, labels: s.labels });
  }
  return out;
}

/** A prom-client metric (what `Registry.registerMetric` takes) for the family `name`. */
function collector(name, help, type) {
  return {
    name,
    help,
    type,
    aggregator: 'sum',
    get() {
      const f = family(name);
      return { name, help, type, aggregator: 'sum', values: f ? values(f) : [] };
    },
    reset() {},
  };
}

/** Register every lease metric family with a prom-client `Registry`. */
function register(registry) {
  for (const f of lease.metrics()) {
    registry.registerMetric(collector(f.name, f.help, f.type));
  }
  return registry;
}

module.exports = { register, collector };
