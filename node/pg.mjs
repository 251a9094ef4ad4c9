// ESM entry of bucket-lease/pg (pg.js is the implementation).
import pg from './pg.js';

export const { SCHEMA, fence, migrate, errorFrom } = pg;
