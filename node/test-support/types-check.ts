// Compiled (not run) by scripts/test-node.sh with `tsc --noEmit --strict`: index.d.ts describes
// what index.js exports, and the README's uses type-check, `await using` included.
import * as lease from 'bucket-lease';
import type { Lease, LeaseError, Status, FencedObject, Leader, Session, SharedGrant, YieldRequested } from 'bucket-lease';

async function main(url: string, signal: AbortSignal): Promise<void> {
  {
    await using l = await lease.acquire(url, { ttl: 30_000, wait: 60_000, label: 'gc-1', signal });
    const epoch: number = l.epoch;
    const left: number = l.remaining();
    l.ensureHeld(5_000);
    const s: AbortSignal = l.signal;
    const lost: Promise<never> = l.lost;
    const token: string = l.token;
    const v: string = await l.fencedPut('data/x', 'text');
    await l.fencedPut('data/y', new Uint8Array([1, 2]));
    const deleted: boolean = await l.fencedDelete('data/x');
    const current = await lease.fencedGet(url, { key: 'data/n' });
    if (current) await l.fencedPut('data/n', '1', { ifVersion: current.version });
    else await l.fencedPut('data/n', '1', { ifAbsent: true });
    const writer: string | null | undefined = current?.holder;
    const v2: string = await l.fencedUpdate('data/n', (old: FencedObject | null) =>
      String(old === null ? 1 : Number(old.data.toString()) + 1),
    );
    await l.fencedUpdate('data/b', async (old) => Buffer.from(old?.data ?? ''));
    void [epoch, left, s, lost, token, v, deleted, writer, v2];
  }
  {
    // Queued locks: shared, permits, scopes; the grant; holders and waiters.
    const r = await lease.acquire(url, { shared: true, pollInterval: '100ms', signal });
    const g: lease.Grant | null = r.grant;
    const mode: 'exclusive' | 'shared' | undefined = g?.mode;
    const range: [number, number] | null | undefined = g?.range;
    await lease.acquire(url, { permits: 3, scope: 'tables/users', queue: true });
    await lease.acquire(url, { queue: true, wakeHints: 'off' });
    await lease.acquire(url, { queue: true, wakeHints: '10.0.0.5' });
    await lease.tryAcquire(url, { range: [0, 4096] });
    const q: Status = await lease.status(url);
    const holders: lease.Participant[] | null = q.holders;
    const firstToken: number | null | undefined = q.waiting?.[0]?.token;
    const permits: number | null = q.permits;
    void [mode, range, holders, firstToken, permits];
    await r.release();
  }
  {
    // Shared sessions: many grants, one heartbeat.
    await using session: Session = await lease.openSession(url, { ttl: '30s', label: 'worker-1', prefix: 'team-a/' });
    await using g: SharedGrant = await session.acquire('jobs/7', { wait: 60_000, pollInterval: 100, signal });
    const r: SharedGrant = await session.acquire(url, { shared: true, priority: 2, wakeHints: 'off' });
    const epoch: number = g.epoch;
    const token: string = g.token;
    const asked: YieldRequested | null = g.yieldRequested;
    const mode: 'exclusive' | 'shared' = g.grant.mode;
    const id: string = g.id;
    const held: boolean = g.held;
    const kind: string | null = g.lostKind;
    const why: string | null = g.lostReason;
    g.ensureHeld();
    // Its fenced operations, as a Lease's.
    const written: string = await g.fencedPut('data/x', 'text', { ifAbsent: true });
    const updated: string = await g.fencedUpdate('data/n', (old: FencedObject | null) => (old ? '2' : '1'));
    const fenced: FencedObject | null = await g.fencedRead('data/x');
    const deleted: boolean = await g.fencedDelete('data/x');
    void [written, updated, fenced, deleted];
    await r.release();
    const facts: [string, string, string, string, number, boolean, number, string | null, boolean] = [
      session.sid, session.url, session.key, session.store, session.ttl, session.alive, session.attached,
      session.lostReason, session.closed,
    ];
    // @ts-expect-error: the session's ttl applies to every grant of it
    await session.acquire('jobs/8', { ttl: 5_000 });
    void [epoch, token, asked, mode, id, held, kind, why, facts];
  }
  {
    // The process's shared session: the ttl chooses it; the grant is a SharedGrant.
    await using p: SharedGrant = await lease.acquireOnProcessSession(url, { ttl: '30s', wait: 60_000, signal });
    const q: SharedGrant = await lease.acquireOnProcessSession(url, { ttl: 30_000, queue: true, shared: true });
    void [p.id, p.token, p.held];
    await q.release();
    // @ts-expect-error: a grant on a shared session keeps no per-grant data
    await lease.acquireOnProcessSession(url, { data: 'x' });
  }
  const maybe: Lease | null = await lease.tryAcquire(url, { ttl: 30_000 });
  if (maybe) await maybe.release();
  const st: Status = await lease.status(url);
  const holderLabel: string | null | undefined = st.holder?.label;
  const expires: number | null = st.expiresInMs;
  for await (const change of lease.watch(url, { signal, pollInterval: 500 })) {
    const state: Status['state'] = change.state;
    if (state === 'broken') console.log('waiting out the broken holder');
    void state;
  }
  const e = new lease.Election(url, { ttl: 15_000, label: 'node-a' });
  const mine: Lease = await e.campaign({ signal });
  const leader: Leader | null = await e.leader();
  for await (const l of e.observe({ signal })) void l;
  await e.resign();
  const obj: FencedObject | null = await lease.fencedGet(url, { key: 'data/x' });
  const gate = new lease.FencingGate('s3://bucket', { prefix: 'fencing' });
  await gate.admit('orders/42', mine);
  await gate.admit('orders/42', mine.token);
  const parsed = lease.parseToken(mine.token);
  const n: number = parsed.epoch;
  const holderId: string | null = parsed.holder;
  const shared: boolean = parsed.shared;
  const grantScope: string | null = parsed.scope;
  const grantRange: [number, number] | null = parsed.range;
  const fenced: FencedObject | null = await mine.fencedRead('data/x');
  const version: string = lease.version;
  try {
    await lease.acquire(url, { wait: 0 });
  } catch (err) {
    const le = err as LeaseError;
    if (le.code === lease.codes.HELD) console.log(le.holder?.id, le.epoch);
    if (le.code === lease.codes.CONFLICT) console.log('read again');
  }
  void [holderLabel, expires, leader, obj, n, holderId, version, shared, grantScope, grantRange, fenced];
}

void main;
