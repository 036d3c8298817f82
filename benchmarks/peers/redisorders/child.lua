-- A child event (a payment, a capture, a shipment) of one order, applied
-- atomically: Redis runs a script alone, so a parent arriving at the same
-- time either finds this child in lost+found or is found by it.
--
-- KEYS: seen (this event id's dedup claim), order, orphans (lost+found:
-- the list of children waiting for this order), children (the applied ones)
-- ARGV: event id, dedup TTL ms, orphan entry, orphan TTL ms, orphan buffer
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then
  return 'duplicate'
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SADD', KEYS[4], ARGV[1])
  return 'applied'
end
if redis.call('RPUSH', KEYS[3], ARGV[3]) > tonumber(ARGV[5]) then
  redis.call('RPOP', KEYS[3])
  return 'rejected'
end
-- The newest child waits longest: the list lives until its deadline, and
-- older children past theirs are dropped when the parent drains the list.
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return 'quarantined'
