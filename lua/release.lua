--[[ release.lua: give a lease back; the slot goes to the head of the queue.

KEYS    the governor's eight keys, see common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3] id       string        the lease id
Reply
  {1, 'released', live}   live = 1 if the lease was still live, 0 if it had
                          expired or was already released (idempotent)
  {1, 'missing'}          no such governor: nothing to release
]]

local id = arg_id(3, 'id')
if not load_state() then return missing_reply() end

local expiry = tonumber(redis.call('ZSCORE', K.leases, id))
local live = 0
if expiry then
  redis.call('ZREM', K.leases, id)
  redis.call('HDEL', K.holders, id)
  if expiry > NOW then live = 1 end
end
reclaim()
grant()
return finish({SCHEMA, 'released', live})
