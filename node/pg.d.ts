// bucket-lease/pg: fencing at a PostgreSQL database with `pg` (docs/postgres.md).

/** What fence() needs of a client: pg's Client and a pool's client have it. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

export interface FenceOptions {
  /** Wait at most this many ms for an earlier holder's open transaction, then LEASE_TIMEOUT (0: try once). */
  lockWait?: number;
  /** The server ends this session once idle this many ms in this transaction. */
  idleTimeout?: number;
}

/** The one SQL definition of database fencing: the lease_fence table and function. */
export declare const SCHEMA: string;

/**
 * Admit `token` (a token string `URL#EPOCH@HOLDER`, or a Lease) for `resource` in the transaction
 * open on `client`, or reject with an Error whose `code` is 'LEASE_FENCED'.
 */
export declare function fence(client: Queryable, resource: string, token: string | { token: string }, options?: FenceOptions): Promise<void>;

/** Install (or upgrade) the lease_fence table and function, in one transaction. */
export declare function migrate(client: Queryable): Promise<void>;

/** The lease error for a `pg` error of a fenced transaction, or null when fencing maps none. */
export declare function errorFrom(err: unknown, token?: string): (Error & { code: string; kind: string; retryable: boolean; url: string | null; holder: null; epoch: number | null }) | null;
