// The page at /: what the realtime bridge serves (design §6), for people:
// the team's presence with a row per device, the workflows with their
// progress and terminal badges, the chat conversations of the signed-in
// user, and the orders.
//
// One feed per stream: a snapshot (every page), then the events from the
// snapshot's cursor, read with fetch() and a streaming reader and parsed
// here (EventSource hides status codes, and the 410 of a cursor that
// cannot resume is the one that matters). The chat, after each connect,
// asks the bridge's sync call what changed in all of the user's
// conversations since its last sync, messages included, rather than one
// request per conversation. A change is applied only when its
// version is higher than the one held, so a replay or an overlapping page
// does no harm. The last cursor fully applied is kept in sessionStorage
// with the state it covers; after a disconnect the feed resumes from it,
// and after a 410 or an `event: reset` it takes a new snapshot. Reconnects
// back off exponentially with jitter.
//
// Browsers open at most six HTTP/1.1 connections to one host, and a tab
// holds four, so tabs of the page share one set: the tab holding a lock
// (Web Locks) runs the feeds and tells the others every change over a
// BroadcastChannel; when it goes, another takes over from the cursor it
// was told. A page that is left closes its connections.
//
// The token comes from the URL's fragment (#token=…), which the browser
// never sends, and travels only in the Authorization header: never in a
// URL the page requests, so no access log holds it.
//
// Each row carries data-key, data-version and data-status (what the row
// shows: a presence or `unknown`, a workflow's status, a conversation's
// last sequence, an order's last event type), and each section its feed's
// data-conn, data-snapshots, data-resumes and data-changes: a read-only
// summary for tests, invisible to people; the chat's section also has
// data-syncs, the sync answers applied.
//
// The composer, typing, ticks and receipts are in compose.js.
'use strict';

const FEEDS = ['presence', 'workflow', 'chat', 'orders'];
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 15000;
// The bridge sends a heartbeat at least every 15 s; three missed ones mean
// the connection is dead even if no error says so.
const SILENCE_MS = 45000;
const SNAPSHOT_LIMIT = 1000;
const MESSAGE_LIMIT = 100;
// How long chat catch-up waits before asking again when the bridge's
// messages are behind the conversation's state.
const MESSAGE_RETRY_MS = 2000;

function hashToken() {
  return new URLSearchParams(location.hash.slice(1)).get('token') || '';
}

const token = hashToken();
const claims = tokenClaims(token);
const user = String(claims.sub || '');

// tokenClaims reads the token's claims: who is signed in, and what keeps
// each user's stored state and shared tabs apart. The bridge checks the
// token; the page only reads it.
function tokenClaims(tok) {
  try {
    const part = tok.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const bytes = Uint8Array.from(atob(part), (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes)) || {};
  } catch {
    return {};
  }
}

// ---- HTTP ----

class HTTPError extends Error {
  constructor(status, detail, retryAfterMs) {
    super(detail ? `${status}: ${detail}` : `HTTP ${status}`);
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}

async function httpError(res) {
  let detail = '';
  try {
    const p = await res.json();
    detail = p.detail || p.title || '';
  } catch {
    // not problem+json
  }
  const seconds = Number(res.headers.get('Retry-After'));
  return new HTTPError(res.status, detail, Number.isFinite(seconds) ? seconds * 1000 : 0);
}

function request(path, accept, signal) {
  return fetch(path, {
    headers: { Authorization: 'Bearer ' + token, Accept: accept },
    cache: 'no-store',
    signal,
  });
}

async function getJSON(path) {
  const res = await request(path, 'application/json');
  if (!res.ok) throw await httpError(res);
  return res.json();
}

// Relative paths, so the page also works behind a proxy that serves the
// bridge under a prefix.
function streamPath(stream, rest) {
  return `v1/streams/${encodeURIComponent(stream)}/${rest}`;
}

// ---- server-sent events ----

// SSEParser turns the text of an event stream into events, as the
// EventSource standard reads it: lines end with CRLF, LF or CR; a blank
// line dispatches; a line starting with ':' is a comment (the bridge's
// heartbeat).
class SSEParser {
  constructor() {
    this.rest = '';
    this.clear();
  }

  clear() {
    this.event = '';
    this.data = [];
    this.id = null;
  }

  push(chunk) {
    let text = this.rest + chunk;
    // A CR at the end may be the first half of a CRLF.
    let held = '';
    if (text.endsWith('\r')) {
      held = '\r';
      text = text.slice(0, -1);
    }
    const lines = text.split(/\r\n|\r|\n/);
    this.rest = lines.pop() + held;
    const out = [];
    for (const line of lines) {
      if (line === '') {
        if (this.data.length > 0) {
          out.push({ event: this.event || 'message', data: this.data.join('\n'), id: this.id });
        }
        this.clear();
        continue;
      }
      if (line[0] === ':') continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value[0] === ' ') value = value.slice(1);
      if (field === 'event') this.event = value;
      else if (field === 'data') this.data.push(value);
      else if (field === 'id' && !value.includes('\0')) this.id = value;
    }
    return out;
  }
}

// ---- feeds ----

// Feed is one stream's state as the page holds it, and the connection that
// keeps it current. Its hooks: changed(feed) when entities changed,
// connected(feed) after each (re)connect, publish(message) for the tabs
// that follow this one.
class Feed {
  constructor(stream, hooks) {
    this.stream = stream;
    this.hooks = hooks;
    this.running = false;
    this.entities = new Map();
    this.cursor = null;
    this.conn = 'connecting';
    this.detail = '';
    this.counts = { snapshots: 0, resumes: 0, changes: 0 };
    this.attempt = 0;
    this.wake = null;
    this.ctrl = null;
    this.paused = null;
    this.unpause = null;
    this.fromSnapshot = false;
    this.saveTimer = 0;
    this.storageKey = `driftguard:v1:${user}:${stream}`;
    this.restore();
  }

  // apply keeps e when its version is higher than the one held.
  apply(e) {
    const held = this.entities.get(e.key);
    if (held && held.version >= e.version) return false;
    this.entities.set(e.key, e);
    return true;
  }

  async run() {
    for (;;) {
      while (this.paused) await this.paused;
      let minWaitMs = 0;
      try {
        if (this.cursor === null) await this.snapshot();
        const end = await this.follow();
        if (end === 'reset') {
          this.dropCursor();
          this.setConn('resyncing', 'the page fell behind the stream; taking a new snapshot');
        } else {
          this.setConn('retrying', 'the bridge closed the connection');
        }
      } catch (err) {
        if (this.paused) continue;
        if (!(err instanceof HTTPError)) {
          // fetch() fails with a TypeError when the bridge cannot be reached
          // or the connection breaks.
          this.setConn('retrying', err instanceof TypeError ? 'the bridge is unreachable' : err.message);
        } else if (err.status === 410) {
          // The cursor cannot resume here: a new snapshot, right away.
          this.dropCursor();
          this.attempt = 0;
          this.setConn('resyncing', 'the cursor is gone; taking a new snapshot');
        } else if (err.status === 401) {
          this.setConn('refused', `the bridge refused the token (${err.message}); open the link driftguard prints again`);
          return;
        } else if (err.status === 403) {
          this.setConn('refused', 'the token does not let you read this stream');
          return;
        } else if (err.status === 404) {
          this.setConn('refused', 'the bridge serves no stream of this name');
          return;
        } else {
          minWaitMs = err.retryAfterMs;
          this.setConn('retrying', err.message);
        }
      }
      if (!this.paused) await this.backoff(minWaitMs);
    }
  }

  // pause closes the connection while the page is hidden away (left, or
  // kept in the back/forward cache): browsers allow few connections per
  // host, and a page that is gone must not hold them. resume reconnects
  // from the cursor.
  pause() {
    if (this.paused) return;
    this.paused = new Promise((resolve) => {
      this.unpause = resolve;
    });
    if (this.ctrl) this.ctrl.abort(new Error('the page was left'));
    this.wakeUp();
  }

  resume() {
    if (!this.paused) return;
    this.paused = null;
    this.unpause();
  }

  // snapshot takes every page, then applies them at once: keys the
  // snapshot no longer has (a conversation the user left) are dropped, the
  // others applied by version, and the cursor read before the first page
  // becomes the feed's.
  async snapshot() {
    if (this.conn !== 'resyncing') this.setConn('connecting', 'taking a snapshot');
    const got = [];
    let cursor = null;
    let pageToken = null;
    do {
      const q = new URLSearchParams({ limit: String(SNAPSHOT_LIMIT) });
      if (pageToken) q.set('page_token', pageToken);
      const page = await getJSON(streamPath(this.stream, 'snapshot?' + q));
      if (cursor === null) cursor = page.cursor;
      for (const e of page.entities) got.push(e);
      pageToken = page.next_page_token;
    } while (pageToken);
    const keys = new Set(got.map((e) => e.key));
    for (const key of [...this.entities.keys()]) {
      if (!keys.has(key)) this.entities.delete(key);
    }
    for (const e of got) this.apply(e);
    this.cursor = cursor;
    this.counts.snapshots++;
    this.fromSnapshot = true;
    this.save();
    this.hooks.publish(this.message('state'));
    this.hooks.changed(this);
  }

  // follow reads the events from the cursor until the stream ends
  // ('closed'), the bridge resets it ('reset'), or it fails (throws).
  async follow() {
    if (this.paused) throw new Error('the page was left');
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    let silence = 0;
    const alive = () => {
      clearTimeout(silence);
      silence = setTimeout(() => ctrl.abort(new Error('the connection went silent')), SILENCE_MS);
    };
    alive();
    try {
      const res = await request(streamPath(this.stream, 'events?cursor=' + encodeURIComponent(this.cursor)),
        'text/event-stream', ctrl.signal);
      if (!res.ok) throw await httpError(res);
      if (!this.fromSnapshot) this.counts.resumes++;
      this.fromSnapshot = false;
      this.attempt = 0;
      this.setConn('live', '');
      this.hooks.connected(this);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      const parser = new SSEParser();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return 'closed';
        alive();
        const applied = [];
        let removed = false;
        const before = this.cursor;
        for (const ev of parser.push(value)) {
          if (ev.event === 'reset') return 'reset';
          if (ev.event === 'left') {
            // Removed from a conversation: it goes from the list (its
            // messages up to readable_until_seq stay readable).
            removed = this.entities.delete(JSON.parse(ev.data).key) || removed;
            continue;
          }
          if (ev.event === 'typing') {
            this.hooks.typing(JSON.parse(ev.data));
            continue;
          }
          if (ev.event !== 'state') continue;
          // A message that does not parse throws: the feed reconnects from
          // the last cursor it applied, before that message.
          const e = JSON.parse(ev.data);
          if (this.apply(e)) {
            this.counts.changes++;
            applied.push(e);
          }
          if (ev.id) this.cursor = ev.id;
        }
        if (this.cursor !== before) this.hooks.publish(this.message('change', applied));
        if (applied.length > 0 || removed) this.hooks.changed(this);
        this.scheduleSave();
      }
    } finally {
      clearTimeout(silence);
      ctrl.abort();
      this.ctrl = null;
    }
  }

  // backoff waits 0.5 s, doubling to 15 s, each ±25 %, or at least what
  // the bridge's Retry-After said; wakeUp ends the wait early.
  backoff(minMs) {
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 16);
    const ms = Math.max(minMs, base * (0.75 + Math.random() * 0.5));
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  wakeUp() {
    if (this.wake) this.wake();
  }

  dropCursor() {
    this.cursor = null;
    try {
      sessionStorage.removeItem(this.storageKey);
    } catch {
      // storage unavailable: nothing kept
    }
  }

  setConn(conn, detail) {
    this.conn = conn;
    this.detail = detail;
    renderConn(this);
    this.hooks.publish(this.message('conn'));
  }

  // lead runs the feed in this tab: the first time, or again after pause.
  lead() {
    this.resume();
    if (!this.running) {
      this.running = true;
      this.run();
    }
  }

  // message is what the tabs that follow this one are told: the cursor
  // with the entities it covers (all of them for 'state'), and the
  // connection's state.
  message(kind, entities) {
    return {
      kind, stream: this.stream, cursor: this.cursor, conn: this.conn, detail: this.detail, counts: { ...this.counts },
      entities: kind === 'state' ? [...this.entities.values()] : entities || [],
    };
  }

  // adopt takes what the leading tab said.
  adopt(m) {
    if (m.kind === 'state') {
      const keys = new Set(m.entities.map((e) => e.key));
      for (const key of [...this.entities.keys()]) {
        if (!keys.has(key)) this.entities.delete(key);
      }
    }
    let changed = m.kind === 'state';
    for (const e of m.entities) changed = this.apply(e) || changed;
    if (m.cursor !== null) this.cursor = m.cursor;
    this.counts = m.counts;
    const wasLive = this.conn === 'live';
    this.conn = m.conn;
    this.detail = m.detail;
    renderConn(this);
    if (changed) this.hooks.changed(this);
    if (this.conn === 'live' && !wasLive) this.hooks.connected(this);
    this.scheduleSave();
  }

  // The stored cursor and the entities it covers are written together, so
  // what a reload restores is one consistent point of the stream.
  scheduleSave() {
    if (!this.saveTimer) this.saveTimer = setTimeout(() => this.save(), 500);
  }

  save() {
    clearTimeout(this.saveTimer);
    this.saveTimer = 0;
    if (this.cursor === null) return;
    try {
      sessionStorage.setItem(this.storageKey, JSON.stringify({ cursor: this.cursor, entities: [...this.entities.values()] }));
    } catch {
      // Over quota: a reload then takes a snapshot.
      this.dropCursor();
    }
  }

  restore() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(this.storageKey) || 'null');
      if (saved && typeof saved.cursor === 'string' && Array.isArray(saved.entities)) {
        for (const e of saved.entities) this.apply(e);
        this.cursor = saved.cursor;
      }
    } catch {
      this.entities.clear();
      this.cursor = null;
    }
  }
}

// ---- what rows show ----

function isPast(ms, now) {
  return ms > 0 && now >= ms;
}

// A claim past its expiry shows `unknown`, never the last state.
function presenceOf(e, now) {
  if (e.expired || isPast(e.expires_at_ms, now)) return 'unknown';
  return String((e.state && e.state.presence) || 'unknown');
}

function deviceStatus(d, now) {
  if (isPast(d.expires_at_ms, now)) return 'unknown';
  return String(d.presence || 'unknown');
}

function lastSeqOf(e) {
  return (e && e.state && Number(e.state.last_seq)) || 0;
}

function byKey(a, b) {
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') node.className = v;
    else if (k === 'data') Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== null && c !== undefined) node.append(c);
  }
  return node;
}

function clock(ms) {
  return ms > 0 ? new Date(ms).toLocaleTimeString() : '';
}

function statusLine(status, expiresAt) {
  const dot = el('span', { class: 'dot dot-' + status.toLowerCase(), 'aria-hidden': 'true' });
  const text = el('span', { class: 'presence-text' }, status.toLowerCase());
  if (status === 'unknown' && expiresAt > 0) text.title = 'the last claim expired at ' + clock(expiresAt);
  return [dot, text];
}

// ---- views ----

const feeds = {};

function section(stream) {
  return document.querySelector(`section[data-stream="${stream}"]`);
}

// renderRows shows a feed's entities in key order, a row each made by
// rowOf, in the list #<stream>-list, or #<stream>-empty when there is none.
function renderRows(stream, rowOf) {
  const rows = [...feeds[stream].entities.values()].sort(byKey).map(rowOf);
  document.getElementById(stream + '-list').replaceChildren(...rows);
  document.getElementById(stream + '-empty').hidden = rows.length > 0;
}

// entityItem is an entity's row, with the summary attributes: its key,
// version and what it shows.
function entityItem(e, status, attrs, ...children) {
  return el('li', { ...attrs, data: { key: e.key, version: String(e.version), status } }, ...children);
}

function renderPresence() {
  if (!feeds.presence) return;
  const now = Date.now();
  renderRows('presence', (e) => {
    const status = presenceOf(e, now);
    const li = entityItem(e, status, { class: 'member' },
      el('span', { class: 'row' }, ...statusLine(status, e.expires_at_ms), el('span', { class: 'name' }, e.key)));
    const devices = Object.entries((e.state && e.state.devices) || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    if (devices.length > 0) {
      li.append(el('ul', { class: 'devices', 'aria-label': `devices of ${e.key}` }, ...devices.map(([id, d]) => {
        const s = deviceStatus(d, now);
        return el('li', { class: 'device', data: { device: id, version: String(d.version), status: s } },
          el('span', { class: 'row' }, ...statusLine(s, d.expires_at_ms), el('span', { class: 'name' }, id)));
      })));
    }
    return li;
  });
}

function renderWorkflows() {
  renderRows('workflow', (e) => {
    const st = e.state || {};
    const status = String(st.status || 'unknown');
    const terminal = TERMINAL.has(status);
    const li = entityItem(e, status, { class: 'workflow' });
    const head = el('span', { class: 'row' }, el('span', { class: 'name' }, e.key));
    head.append(terminal ? el('span', { class: 'badge badge-' + status }, status) : el('span', { class: 'state' }, status));
    li.append(head);
    const hasProgress = typeof st.progress === 'number';
    if (hasProgress || status === 'completed' || !terminal) {
      const value = hasProgress ? st.progress : status === 'completed' ? 100 : null;
      const bar = el('progress', { max: '100', 'aria-label': `progress of ${e.key}` });
      if (value !== null) bar.value = value;
      li.append(el('span', { class: 'progress' }, bar,
        el('span', { class: 'percent' }, value !== null ? `${Math.round(value)} %` : 'no progress reported')));
    }
    li.append(el('span', { class: 'meta' }, `step ${st.sequence ?? e.version}` + (st.occurred_at ? ` · ${st.occurred_at}` : '')));
    return li;
  });
}

function renderOrders() {
  renderRows('orders', (e) => {
    const st = e.state || {};
    const status = String(st.event_type || 'unknown');
    return entityItem(e, status, { class: 'order' },
      el('span', { class: 'name' }, e.key),
      el('span', { class: 'state' }, status.replace(/^order\./, '').replace(/_/g, ' ')),
      el('span', { class: 'meta' }, clock(e.updated_at_ms)));
  });
}

// oneAtATime makes task run one call at a time: called while a call runs,
// it runs once more after it (however often it was called). running()
// says whether a call runs.
function oneAtATime(task) {
  let running = false;
  let again = false;
  const run = async () => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await task();
      } while (again);
    } finally {
      running = false;
    }
  };
  run.running = () => running;
  return run;
}

// chat is what the page holds of the user's conversations: per
// conversation its messages, each conversation_seq once, in order, and the
// sequence they are complete up to; and the conversation shown. After each
// (re)connect one sync call brings every conversation up to date; while
// live, the conversation shown asks for its new messages itself.
const chat = {
  selected: null,
  held: new Map(),
  // since is the last sync's token: what changed after it comes next.
  since: null,
  syncs: 0,
  retry: 0,

  conv(key) {
    let c = this.held.get(key);
    if (!c) {
      c = { messages: [], lastSeq: 0, note: '' };
      this.held.set(key, c);
    }
    return c;
  },

  select(key) {
    if (key === this.selected) return;
    this.selected = key;
    renderChat();
    if (key !== null) this.catchUp();
  },

  // entitiesChanged keeps a conversation selected (the one the user chose,
  // else team-room, else the first) and fetches what its state says is new.
  entitiesChanged() {
    const ents = feeds.chat.entities;
    if (this.selected === null || !ents.has(this.selected)) {
      const keys = [...ents.keys()].sort();
      this.select(ents.has('team-room') ? 'team-room' : keys.length > 0 ? keys[0] : null);
    } else if (!this.syncing.running() && lastSeqOf(ents.get(this.selected)) > this.conv(this.selected).lastSeq) {
      // A sync under way brings the messages, and looks again when done.
      this.catchUp();
    }
  },

  // merge adds messages to conversation c, each conversation_seq once.
  merge(c, msgs) {
    const seen = new Set(c.messages.map((m) => m.conversation_seq));
    let added = false;
    for (const m of msgs) {
      if (seen.has(m.conversation_seq)) continue;
      seen.add(m.conversation_seq);
      c.messages.push(m);
      added = true;
    }
    if (added) c.messages.sort((a, b) => a.conversation_seq - b.conversation_seq);
  },

  // leave drops a conversation the user is no longer a member of.
  leave(key) {
    feeds.chat.entities.delete(key);
    this.held.delete(key);
    renderChatList();
    this.entitiesChanged();
  },

  // sync asks what changed since the last sync (everything the first
  // time, or once the bridge no longer knows the token: 410), applies it,
  // pages on where a conversation has more than one answer holds, and only
  // then keeps the answer's token; then the conversation shown catches up
  // if it still lacks messages.
  async sync() {
    await this.syncing();
    if (!this.syncing.running()) this.entitiesChanged();
  },

  syncing: oneAtATime(() => chat.syncOnce()),

  async syncOnce() {
    let answer;
    for (;;) {
      const q = new URLSearchParams({ limit: String(MESSAGE_LIMIT) });
      if (this.since !== null) q.set('since', this.since);
      try {
        answer = await getJSON(streamPath('chat', 'sync?' + q));
        break;
      } catch (err) {
        if (err instanceof HTTPError && err.status === 410 && this.since !== null) {
          this.since = null;
          continue;
        }
        // The feed reconnects (and syncs) when the bridge is gone; a sync
        // that failed on its own is asked again.
        if (!(err instanceof HTTPError) || err.status >= 500) this.syncLater();
        return;
      }
    }
    const initial = this.since === null;
    const named = new Set();
    const behind = [];
    for (const c of answer.conversations) {
      named.add(c.key);
      if (!c.entity) {
        // The page shows the conversations the user is a member of.
        feeds.chat.entities.delete(c.key);
        this.held.delete(c.key);
        continue;
      }
      feeds.chat.apply(c.entity);
      const h = this.conv(c.key);
      this.merge(h, c.messages);
      // The messages follow after_seq: they complete what the page holds
      // only when it holds that much.
      if (h.lastSeq >= c.after_seq) h.lastSeq = Math.max(h.lastSeq, c.next_after_seq);
      if (c.gap) h.note = 'Earlier messages are no longer held by the bridge.';
      if (h.lastSeq < lastSeqOf(c.entity)) behind.push(c.key);
    }
    if (initial) {
      for (const key of [...this.held.keys()]) {
        if (!named.has(key)) this.held.delete(key);
      }
    }
    for (const key of behind) await this.fetchMessages(key);
    this.since = answer.next;
    this.syncs++;
    section('chat').dataset.syncs = String(this.syncs);
    renderChat();
  },

  syncLater() {
    setTimeout(() => this.sync(), MESSAGE_RETRY_MS);
  },

  // catchUp asks for the messages of the conversation shown after the last
  // one held.
  catchUp: oneAtATime(async () => {
    const key = chat.selected;
    // The bridge may hold the conversation's state before its messages.
    if (key !== null && !(await chat.fetchMessages(key)) && key === chat.selected) chat.retryLater();
  }),

  // fetchMessages pages through a conversation's messages after the last
  // one held, and reports whether it holds them up to the state's last
  // sequence.
  async fetchMessages(key) {
    const h = this.conv(key);
    let reloaded = false;
    for (;;) {
      const q = new URLSearchParams({ after_seq: String(h.lastSeq), limit: String(MESSAGE_LIMIT) });
      let page;
      try {
        page = await getJSON(streamPath('chat', `entities/${encodeURIComponent(key)}/messages?${q}`));
      } catch (err) {
        if (err instanceof HTTPError && err.status === 403) {
          // No longer a member: the conversation goes.
          this.leave(key);
        }
        return false;
      }
      if (this.held.get(key) !== h) return false; // left meanwhile
      if (page.limited && !reloaded) {
        // What came after the last message held is no longer held by the
        // bridge: show the most recent page instead.
        reloaded = true;
        const top = Math.max(h.lastSeq, lastSeqOf(feeds.chat.entities.get(key)));
        h.messages = [];
        h.lastSeq = Math.max(0, top - MESSAGE_LIMIT);
        h.note = 'Earlier messages are no longer held by the bridge; these are the most recent.';
        continue;
      }
      this.merge(h, page.messages);
      h.lastSeq = Math.max(h.lastSeq, page.next_after_seq);
      if (key === this.selected) renderChat();
      if (page.messages.length < MESSAGE_LIMIT) break;
    }
    return h.lastSeq >= lastSeqOf(feeds.chat.entities.get(key));
  },

  retryLater() {
    if (!this.retry) {
      this.retry = setTimeout(() => {
        this.retry = 0;
        this.catchUp();
      }, MESSAGE_RETRY_MS);
    }
  },
};

function renderChatList() {
  // The rows are made anew: a keyboard user's focus moves to the new button.
  const focused = document.activeElement && document.activeElement.closest('#chat-list li');
  const focusKey = focused ? focused.dataset.key : null;
  let focus = null;
  renderRows('chat', (e) => {
    const seq = lastSeqOf(e);
    const button = el('button', { type: 'button', class: 'conversation-button' }, e.key,
      el('span', { class: 'count' }, seq === 1 ? '1 message' : `${seq} messages`));
    if (e.key === chat.selected) button.setAttribute('aria-current', 'true');
    button.addEventListener('click', () => chat.select(e.key));
    if (e.key === focusKey) focus = button;
    return entityItem(e, String(seq), {}, button);
  });
  if (focus) focus.focus();
}

function renderChat() {
  renderChatList();
  const article = document.getElementById('conversation');
  const e = chat.selected === null ? null : feeds.chat.entities.get(chat.selected);
  article.hidden = !e;
  if (!e) return;
  document.getElementById('conversation-title').textContent = e.key;
  const st = e.state || {};
  const cursors = st.cursors || {};
  const members = (st.members || []).map((m) => {
    const read = cursors[m] && cursors[m].read;
    return read ? `${m} (read ${read})` : m;
  });
  document.getElementById('conversation-members').textContent = 'Members: ' + (members.join(', ') || 'none');
  const note = document.getElementById('conversation-note');
  const held = chat.conv(e.key);
  note.textContent = held.note;
  note.hidden = !held.note;
  // The newest message stays in view, unless the reader scrolled up.
  const list = document.getElementById('messages');
  const atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 24;
  // The messages, with ticks on the user's own, then those still sending
  // (compose.js).
  list.replaceChildren(...held.messages.map((m) => messageItem(m, e)), ...unsentItems(e.key, held));
  if (atEnd) list.scrollTop = list.scrollHeight;
  typing.render();
  receipts.update(e.key);
}

const CONN_TEXT = {
  connecting: 'connecting…',
  live: 'live',
  retrying: 'reconnecting',
  resyncing: 'resynchronizing',
  refused: 'not shown',
};

function renderConn(feed) {
  const s = section(feed.stream);
  s.dataset.conn = feed.conn;
  s.dataset.snapshots = String(feed.counts.snapshots);
  s.dataset.resumes = String(feed.counts.resumes);
  s.dataset.changes = String(feed.counts.changes);
  const p = s.querySelector('.conn');
  p.className = 'conn conn-' + feed.conn;
  p.textContent = CONN_TEXT[feed.conn] + (feed.detail ? ': ' + feed.detail : '');
  renderStatus();
}

// renderStatus sums the feeds up in one line: live, or what each of the
// others is doing, streams in the same state named together.
function renderStatus() {
  const notLive = Object.values(feeds).filter((f) => f.conn !== 'live');
  const groups = new Map();
  for (const f of notLive) {
    const what = CONN_TEXT[f.conn] + (f.detail ? ` (${f.detail})` : '');
    groups.set(what, [...(groups.get(what) || []), f.stream]);
  }
  const text = notLive.length === 0
    ? 'Live: every stream is up to date.'
    : [...groups].map(([what, streams]) => `${streams.join(', ')}: ${what}`).join('; ');
  const status = document.getElementById('status');
  if (status.textContent !== text) status.textContent = text;
  status.dataset.live = String(notLive.length === 0);
}

const RENDER = {
  presence: renderPresence,
  workflow: renderWorkflows,
  chat: () => {
    renderChat();
    chat.entitiesChanged();
  },
  orders: renderOrders,
};

// Renders are batched: a burst of changes paints once.
const dirty = new Set();
let renderQueued = false;

function changed(feed) {
  dirty.add(feed.stream);
  const s = section(feed.stream);
  s.dataset.changes = String(feed.counts.changes);
  s.dataset.snapshots = String(feed.counts.snapshots);
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => {
    renderQueued = false;
    for (const stream of dirty) RENDER[stream]();
    dirty.clear();
  }, 0);
}

function connected(feed) {
  // After each (re)connect, one sync call brings every conversation up to
  // date, and the messages still unacknowledged are sent again.
  if (feed.stream === 'chat') {
    chat.sync();
    outbox.flush();
  }
}

// typingReceived shows a typing event, and tells the tabs that follow.
function typingReceived(t) {
  typing.receive(t);
  tabs.publish({ kind: 'typing', typing: t });
}

// ---- tabs ----

// tabs shares one set of connections among the tabs of one user and token
// scope (see the top of this file).
const tabs = {
  channel: null,
  leading: false,
  release: null,
  name: 'driftguard:' + JSON.stringify([user, claims.streams || []]),

  start() {
    if (!navigator.locks || typeof BroadcastChannel !== 'function') {
      // Not shared (an insecure context has no Web Locks): every tab
      // connects on its own.
      this.lead();
      return;
    }
    this.channel = new BroadcastChannel(this.name);
    this.channel.onmessage = (e) => this.receive(e.data);
    this.follow();
  },

  // follow asks the leading tab, if any, for what it holds, and waits for
  // the lock to lead.
  follow() {
    document.body.dataset.tab = 'follows';
    for (const feed of Object.values(feeds)) {
      if (feed.conn === 'live') feed.setConn('connecting', 'waiting for the tab that leads');
    }
    this.channel.postMessage({ kind: 'hello' });
    navigator.locks.request(this.name, () => new Promise((release) => {
      this.release = release;
      this.lead();
    }));
  },

  lead() {
    this.leading = true;
    document.body.dataset.tab = 'leads';
    for (const feed of Object.values(feeds)) feed.lead();
  },

  publish(m) {
    if (this.leading && this.channel) this.channel.postMessage(m);
  },

  receive(m) {
    if (m.kind === 'hello') {
      if (this.leading) {
        for (const feed of Object.values(feeds)) this.publish(feed.message('state'));
      }
      return;
    }
    if (m.kind === 'typing') {
      if (!this.leading) typing.receive(m.typing);
      return;
    }
    if (!this.leading && feeds[m.stream]) feeds[m.stream].adopt(m);
  },

  // hide closes the connections of a page that is left, and lets another
  // tab lead; show, back from the back/forward cache, follows or leads
  // again.
  hide() {
    for (const feed of Object.values(feeds)) {
      feed.save();
      feed.pause();
    }
    this.leading = false;
    document.body.dataset.tab = 'left';
    if (this.release) {
      this.release();
      this.release = null;
    }
  },

  show() {
    if (this.channel) this.follow();
    else this.lead();
  },
};

function start() {
  if (!token) {
    document.getElementById('status').textContent =
      'No token: open the link that `driftguard dev` prints (it ends in #token=…).';
    for (const stream of FEEDS) section(stream).dataset.conn = 'refused';
    return;
  }
  document.getElementById('who').textContent = user ? `Signed in as ${user}` : '';
  for (const stream of FEEDS) {
    feeds[stream] = new Feed(stream, { changed, connected, typing: typingReceived, publish: (m) => tabs.publish(m) });
  }
  for (const feed of Object.values(feeds)) {
    renderConn(feed);
    if (feed.entities.size > 0) changed(feed);
  }
  composer.start();
  tabs.start();
  // Expiry is a matter of time, not of events: the sidebar is recomputed
  // every second and whenever the page becomes visible again.
  setInterval(renderPresence, 1000);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState !== 'visible') return;
    renderPresence();
    for (const feed of Object.values(feeds)) feed.wakeUp();
  });
  // Another link (another token) opened in this tab: start over with it.
  window.addEventListener('hashchange', () => {
    if (hashToken() !== token) location.reload();
  });
  window.addEventListener('online', () => {
    for (const feed of Object.values(feeds)) feed.wakeUp();
  });
  window.addEventListener('pagehide', () => tabs.hide());
  window.addEventListener('pageshow', (e) => {
    if (e.persisted) tabs.show();
  });
}

// compose.js, loaded after this file, is part of the page: start once
// both are read.
document.addEventListener('DOMContentLoaded', start);
