/** Register every lease metric family with a prom-client `Registry` (read afresh at each scrape). */
export declare function register<R extends { registerMetric(metric: unknown): void }>(registry: R): R
