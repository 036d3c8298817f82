-- An order.created, applied atomically with the reconciliation of every
-- child waiting for it in lost+found.
--
-- KEYS: seen (this event id's dedup claim), order, orphans, children
-- ARGV: event id, dedup TTL ms, order body, now (unix ms)
-- Returns {outcome, children reconciled, children expired}.
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then
  return {'duplicate', 0, 0}
end
redis.call('SET', KEYS[2], ARGV[3])
local waiting = redis.call('LRANGE', KEYS[3], 0, -1)
if #waiting == 0 then
  return {'applied', 0, 0}
end
redis.call('DEL', KEYS[3])
local now = tonumber(ARGV[4])
local reconciled, expired = 0, 0
for _, entry in ipairs(waiting) do
  -- "<deadline ms> <id length> <id><body>", as the child script stored it.
  local deadline, length, at = string.match(entry, '^(%d+) (%d+) ()')
  if tonumber(deadline) >= now then
    redis.call('SADD', KEYS[4], string.sub(entry, at, at + tonumber(length) - 1))
    reconciled = reconciled + 1
  else
    expired = expired + 1
  end
end
return {'applied', reconciled, expired}
