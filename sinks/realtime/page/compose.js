// The chat's writing half, loaded before app.js and called by it: the
// composer, whose messages are sent through the bridge (POST …/messages)
// each with a client_message_id made once and kept, in memory and in
// localStorage, until the bridge acknowledges it with its
// conversation_seq; the typing of the others ("alice is typing…", gone at
// its expires_at_ms) and the user's own, sent while they type; the
// delivered and read ticks of the user's messages, from the receipts in
// the conversation's state (`cursors`); and the user's own receipts,
// delivered for what the page holds and read for what it shows.
//
// A message is shown once: pending (and retried after a reconnect, a 202
// pending, a network error or a 5xx) until acknowledged, then as the
// conversation's message with its sequence, whichever of the answer and
// the conversation's messages brings it first.
//
// Summary attributes for tests: a message's li has data-seq,
// data-client-message-id and, for the user's own, data-tick (sent,
// delivered, read); a pending one data-pending; #typing has data-users.
'use strict';

// How often the user's typing is sent while they type: below the bridge's
// bridge.typing_ttl (5 s by default), so the others' indicator stays on,
// and above its bridge.typing_rate (one a second), so none is coalesced.
const TYPING_EVERY_MS = 3000;
// When a send that did not complete is tried again, at first; doubling to
// the feeds' maximum back-off.
const SEND_RETRY_MS = 1000;

// device names this browser to the bridge (X-Driftguard-Device) unless
// the token names one: kept, so a retry after a reload is the same
// device's.
const device = (() => {
  if (claims.device) return String(claims.device);
  const key = `driftguard:device:${user}`;
  try {
    let d = localStorage.getItem(key);
    if (!d) {
      d = 'web-' + crypto.randomUUID().slice(0, 8);
      localStorage.setItem(key, d);
    }
    return d;
  } catch {
    return 'web';
  }
})();

// postJSON POSTs body to a stream path with the token and the device, and
// returns the response (fetch's TypeError when the bridge is unreachable).
function postJSON(path, body) {
  return fetch(path, {
    method: 'POST',
    headers: {
      Authorization: 'Bearer ' + token, 'Content-Type': 'application/json', Accept: 'application/json',
      'X-Driftguard-Device': device,
    },
    body: JSON.stringify(body),
    cache: 'no-store',
  });
}

function conversationPath(key, rest) {
  return streamPath('chat', `entities/${encodeURIComponent(key)}/${rest}`);
}

// outbox holds the messages written and not yet acknowledged, oldest
// first, in localStorage as well: a reload sends them again with the same
// client_message_id, and the bridge answers a retry with the original
// result.
const outbox = {
  key: `driftguard:outbox:${user}`,
  entries: [],
  // failed are messages the bridge refused (not a member, too large…):
  // shown with why, never sent again.
  failed: [],
  retryMs: SEND_RETRY_MS,
  timer: 0,

  load() {
    try {
      const kept = JSON.parse(localStorage.getItem(this.key) || '[]');
      if (Array.isArray(kept)) this.entries = kept.filter((m) => m && m.client_message_id && m.conversation);
    } catch {
      this.entries = [];
    }
  },

  save() {
    try {
      localStorage.setItem(this.key, JSON.stringify(this.entries));
    } catch {
      // Storage full or off: the messages stay in memory.
    }
  },

  add(conversation, body) {
    this.entries.push({ conversation, body, client_message_id: crypto.randomUUID(), written_at_ms: Date.now() });
    this.save();
    renderChat();
    this.flush();
  },

  drop(m) {
    this.entries = this.entries.filter((x) => x !== m);
    this.save();
  },

  // flush sends the entries in order; the first that must wait stops it
  // (the order a user wrote in is the order sent), and is tried again
  // later, or at the next reconnect.
  flush: oneAtATime(async () => {
    for (const m of [...outbox.entries]) {
      const wait = await outbox.send(m);
      if (wait !== 0) {
        outbox.later(wait);
        return;
      }
    }
    outbox.retryMs = SEND_RETRY_MS;
  }),

  // send sends one message and returns 0 when it is done with it
  // (acknowledged or refused), else how long to wait before trying again.
  async send(m) {
    let res;
    try {
      res = await postJSON(conversationPath(m.conversation, 'messages'), { client_message_id: m.client_message_id, body: m.body });
    } catch {
      return this.backoff(0); // unreachable: the feed's reconnect flushes too
    }
    if (res.status === 200 || res.status === 201) {
      const ack = await res.json();
      this.drop(m);
      const c = chat.conv(m.conversation);
      chat.merge(c, [{
        conversation_seq: ack.conversation_seq, message_id: ack.message_id, client_message_id: m.client_message_id,
        sender_id: user, body: m.body, accepted_at_ms: ack.accepted_at_ms || Date.now(),
      }]);
      renderChat();
      return 0;
    }
    if (res.status === 202 || res.status === 429 || res.status >= 500) {
      // Pending (the decision is not known yet), rate limited, or the
      // bridge in trouble: the same client_message_id again, later.
      const err = await httpError(res);
      return this.backoff(err.retryAfterMs);
    }
    const err = await httpError(res);
    this.drop(m);
    this.failed.push({ ...m, why: err.message });
    renderChat();
    return 0;
  },

  backoff(minMs) {
    const ms = Math.max(minMs, this.retryMs * (0.75 + Math.random() * 0.5));
    this.retryMs = Math.min(BACKOFF_MAX_MS, this.retryMs * 2);
    return ms;
  },

  later(ms) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.flush(), ms);
  },
};

// typing holds the others' typing per conversation, each until its
// expires_at_ms, and sends the user's own.
const typing = {
  shown: new Map(), // conversation → Map(user → expires_at_ms)
  timer: 0,
  sentAt: 0,

  receive(t) {
    if (!t || t.user_id === user || !(t.expires_at_ms > Date.now())) return;
    let users = this.shown.get(t.key);
    if (!users) {
      users = new Map();
      this.shown.set(t.key, users);
    }
    users.set(t.user_id, Math.max(users.get(t.user_id) || 0, t.expires_at_ms));
    this.render();
  },

  // render shows who is typing in the conversation shown, and comes back
  // when the first of them expires.
  render() {
    const now = Date.now();
    let next = Infinity;
    for (const [key, users] of this.shown) {
      for (const [u, until] of users) {
        if (until <= now) users.delete(u);
        else next = Math.min(next, until);
      }
      if (users.size === 0) this.shown.delete(key);
    }
    const who = [...(this.shown.get(chat.selected) || new Map()).keys()].sort();
    const line = document.getElementById('typing');
    line.dataset.users = who.join(',');
    line.textContent = who.length === 0 ? '' : who.length === 1 ? `${who[0]} is typing…` : `${who.join(' and ')} are typing…`;
    clearTimeout(this.timer);
    if (next !== Infinity) this.timer = setTimeout(() => this.render(), next - now);
  },

  // typed sends the user's typing in the conversation shown, at most every
  // TYPING_EVERY_MS; a failure is not retried (the next keystroke is).
  typed() {
    const key = chat.selected;
    if (key === null || Date.now() - this.sentAt < TYPING_EVERY_MS) return;
    this.sentAt = Date.now();
    postJSON(conversationPath(key, 'typing'), {}).catch(() => {});
  },
};

// receipts posts the user's delivered and read cursors of a conversation
// when they move: delivered up to the last message the page holds, read
// up to the last one shown while the page is visible. The bridge keeps
// each cursor's highest, so a receipt lost or sent twice does no harm.
const receipts = {
  posted: new Map(), // conversation + type → sequence posted
  update(key) {
    const c = chat.held.get(key);
    const e = feeds.chat && feeds.chat.entities.get(key);
    if (!c || !e || c.messages.length === 0) return;
    const top = c.messages[c.messages.length - 1].conversation_seq;
    const mine = ((e.state && e.state.cursors) || {})[user] || {};
    this.post(key, 'delivered', top, mine.delivered || 0);
    if (key === chat.selected && document.visibilityState === 'visible') this.post(key, 'read', top, mine.read || 0);
  },
  post(key, type, seq, held) {
    const k = key + '\0' + type;
    if (seq <= held || seq <= (this.posted.get(k) || 0)) return;
    this.posted.set(k, seq);
    postJSON(conversationPath(key, 'receipts'), { type, conversation_seq: seq })
      .then((res) => {
        if (!res.ok) this.posted.delete(k); // asked again at the next render
      })
      .catch(() => this.posted.delete(k));
  },
};

// tickOf is how far the user's message seq has gone: 'read' once every
// other member read it, 'delivered' once it reached a device of each,
// else 'sent' (the bridge acknowledged it).
function tickOf(seq, e) {
  const st = (e && e.state) || {};
  const others = (st.members || []).filter((m) => m !== user);
  if (others.length === 0) return 'sent';
  const cur = (m) => (st.cursors && st.cursors[m]) || {};
  if (others.every((m) => (cur(m).read || 0) >= seq)) return 'read';
  if (others.every((m) => Math.max(cur(m).delivered || 0, cur(m).read || 0) >= seq)) return 'delivered';
  return 'sent';
}

const TICK_TEXT = { sent: '✓', delivered: '✓✓', read: '✓✓' };
const TICK_LABEL = { sent: 'sent', delivered: 'delivered', read: 'read' };

// messageItem is one message of conversation e as the list shows it.
function messageItem(m, e) {
  const mine = m.sender_id === user;
  const data = { seq: String(m.conversation_seq), messageId: m.message_id, clientMessageId: m.client_message_id || '' };
  const li = el('li', { class: mine ? 'message mine' : 'message', data },
    el('span', { class: 'sender' }, m.sender_id),
    el('span', { class: 'body' }, m.body),
    el('span', { class: 'seq', title: 'conversation_seq' }, '#' + m.conversation_seq),
    el('time', { datetime: new Date(m.accepted_at_ms).toISOString() }, clock(m.accepted_at_ms)));
  if (mine) {
    const tick = tickOf(m.conversation_seq, e);
    li.dataset.tick = tick;
    li.append(el('span', { class: 'tick tick-' + tick, title: TICK_LABEL[tick], 'aria-label': TICK_LABEL[tick] }, TICK_TEXT[tick]));
  }
  return li;
}

// unsentItems are the user's messages of conversation key not yet shown
// as the conversation's own: pending, or refused.
function unsentItems(key, held) {
  const shown = new Set(held.messages.filter((m) => m.sender_id === user).map((m) => m.client_message_id));
  const item = (m, failed) => el('li', {
    class: failed ? 'message mine pending failed' : 'message mine pending',
    data: { pending: failed ? 'failed' : 'true', clientMessageId: m.client_message_id },
  },
  el('span', { class: 'sender' }, user),
  el('span', { class: 'body' }, m.body),
  el('span', { class: 'tick' }, failed ? 'not sent: ' + m.why : 'sending…'));
  return [
    ...outbox.entries.filter((m) => m.conversation === key && !shown.has(m.client_message_id)).map((m) => item(m, false)),
    ...outbox.failed.filter((m) => m.conversation === key).map((m) => item(m, true)),
  ];
}

// composer wires the form: Enter (or the button) sends, Shift+Enter is a
// new line, and typing is sent while the user writes.
const composer = {
  start() {
    outbox.load();
    const form = document.getElementById('composer');
    const text = document.getElementById('composer-text');
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const body = text.value.trim();
      if (body === '' || chat.selected === null) return;
      text.value = '';
      typing.sentAt = 0;
      outbox.add(chat.selected, body);
    });
    text.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    text.addEventListener('input', () => {
      if (text.value.trim() !== '') typing.typed();
    });
    document.addEventListener('visibilitychange', () => {
      if (chat.selected !== null) receipts.update(chat.selected);
    });
    outbox.flush();
  },
};
