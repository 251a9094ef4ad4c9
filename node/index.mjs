// ESM entry point: the same module as index.js (`import * as lease from 'bucket-lease'`, or
// `import lease from 'bucket-lease'`).
import lease from './index.js';

export default lease;
export const {
  VERSION,
  version,
  acquire,
  tryAcquire,
  status,
  askYield,
  metrics,
  metricsText,
  watch,
  fencedGet,
  parseToken,
  openSession,
  acquireOnProcessSession,
  Election,
  FencingGate,
  Lease,
  Session,
  SharedGrant,
  codes,
} = lease;
