--[[ release.lua: give a lease back; the slot goes to the head of the queue.

Uses    lib/common.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/records.lua, lib/shares.lua,
        lib/origin.lua, lib/plans.lua, lib/upkeep.lua, lib/queue.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3] id       string        the lease id
Reply
  {SCHEMA, 'released', removed}  removed = 1 if the lease was there (live or
                            expired but not yet reclaimed), 0 if already
                            gone (idempotent: releasing twice is harmless)
  {SCHEMA, 'missing'}            no such governor, and callers queued
With nobody queued (or parked) it reads no state and no clock: the lease
and its holder record go, and its counts in held (caps, the reserve);
nothing else changes (a lost state answers 'released').
]]

-- The id is checked (arg_id) before the first write, a pattern match
-- being the dearest part of a release without waiters: up front when
-- callers wait (the slot goes on to the head); else only when holders has
-- no record of it. A record's id was checked when it was admitted or
-- queued; the sentinel, which holders keeps too and no caller's id may
-- name, is checked first.
local id = ARGV[3]
if id == nil or id == SENTINEL then arg_id(3, 'id') end
-- With callers queued the slot goes to the head: read and check the state
-- (and push expiries back when due) before the first write.
-- step: the queue
-- (Redis deletes an emptied zset or hash: one EXISTS over the queue, the
-- parked waiters and held counts those in use, the common answer being
-- none; the zsets are then asked, the reads telling their types, and held
-- is in use when they do not account for the count. The queue is asked
-- for its head, the waiters for its deadline and holders for its record:
-- grant() starts from them when nothing that runs in between can change
-- the queue.)
local in_use = redis.call('EXISTS', KEY.queue, KEY.parked, KEY.held)
local first, queued = nil, false
if in_use > 0 then
  first = redis.call('ZRANGE', KEY.queue, '0', '0', 'WITHSCORES')
  queued = first[1] ~= nil
end
local parked = in_use > (queued and 1 or 0) and redis.call('ZCARD', KEY.parked) > 0
local waiting = queued or parked
local deadline, head_record
if waiting then
  arg_id(3, 'id')
  clock()
  if not load(WRITE) then return missing_reply() end
  prepare(nil, nil, true)
  keep_alive()
  if queued then
    deadline = redis.call('ZSCORE', KEY.waiters, first[1])  -- (the reads tell waiters' and holders' types)
    head_record = redis.call('HGET', KEY.holders, first[1])
    guard_grant(false)  -- what grant() adds
  else
    guard_grant(false, KEY.waiters)  -- (and what grant() adds): written by grant()
  end
end
-- step: the lease
-- A read tells holders' type before the first write (the head's record
-- did, when queued); ZREM tells leases'.
-- While held counts leases (caps, a reserve), the record says what this one counted in.
local counted = in_use > (queued and 1 or 0) + (parked and 1 or 0)
if counted then guard(KEY.held) end
local raw, known
if counted then
  raw = redis.call('HGET', KEY.holders, id)
  known = raw ~= false
elseif queued then
  known = true  -- (HDEL of a lease without a record changes nothing)
else
  known = redis.call('HEXISTS', KEY.holders, id) == 1
end
if not known then arg_id(3, 'id') end
local removed = redis.call('ZREM', KEY.leases, id)
if removed == 1 and known then redis.call('HDEL', KEY.holders, id) end  -- a queued id keeps its place
if removed == 1 and counted then held_remove(record_parse(raw), waiting) end
if not waiting then return {SCHEMA, 'released', removed} end
-- (the head read above is still the head unless reclaim or aging was due,
-- or a parked waiter may have come back: only the queue is in use)
local unchanged = queued and in_use == 1 and queue_settled()
reclaim()
if unchanged then grant(nil, first, deadline, head_record) else grant() end
return finish({SCHEMA, 'released', removed})
