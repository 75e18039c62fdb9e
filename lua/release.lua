--[[ release.lua: give a lease back; the slot goes to the head of the queue.

Uses    lib/admission.lua (after lib/common.lua)
KEYS    the governor's eight keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3] id       string        the lease id
Reply
  {1, 'released', removed}  removed = 1 if the lease was there (live or
                            expired but not yet reclaimed), 0 if already
                            gone (idempotent: releasing twice is harmless)
  {1, 'missing'}            no such governor: nothing to release
]]

local id = arg_id(3, 'id')
if not load_state() then return missing_reply() end

-- Read the queue's head and check holders before the first write; grant()
-- reads the rest before it writes.
local waiting = redis.call('ZRANGE', K.queue, 0, 0)[1]
if waiting then guard(K.holders, K.waiters) else guard(K.holders) end
local removed = redis.call('ZREM', K.leases, id)
if removed == 1 then
  redis.call('HDEL', K.holders, id)
end
reclaim()
if waiting then grant() end
return finish({SCHEMA, 'released', removed})
