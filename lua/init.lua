--[[ init.lua: create a governor's state from a client's config if missing.

Uses    lib/common.lua, lib/shares.lua, lib/capacity.lua, lib/queue.lua, lib/admin.lua, lib/config.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now          int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel      string        where grants to waiters are announced
  ARGV[3] epoch        string        random id of the new state
  ARGV[4] recovered    '1' | '0'     '1' if the client saw this governor before
  ARGV[5] fence_floor  int >= 0      highest fence the client has seen
  ARGV[6] ttl_ms       int ms >= 0   the client's lease TTL: how long a holder
                                     may go on believing in a lease unrenewed
  ARGV[7] listening    '1' | '0'     '1' if the calling client itself listens
  ARGV[8] notice_ms    int ms >= 0   hold when others listen (a loss unknown to the caller)
  ARGV[9] restart_hold '1' | '0'     '1': hold on a server younger than ttl_ms
  ARGV[10..] config    name, value pairs (lib/config.lua): the config the
                       client last saw stored, else its own
Reply
  {SCHEMA, 'created', epoch, name1, value1, ...}   a new state was written
  {SCHEMA, 'exists', epoch, name1, value1, ...}    the state was there; nothing changed
  The pairs are the stored config (the exact stored strings).

Every other script answers {SCHEMA, 'missing'} when the state hash is gone (a
first use, Redis restarted without persistence, FLUSHDB, idle expiry); the
client then runs this script and calls again. The new state is announced
on the channel (a message holding only the epoch): every listening client
renews its leases at once, and renew.lua adopts those of a lost state.

A holder goes on believing in its lease for up to ttl_ms after its last
renewal, even cut off from Redis, so a new state may have holders nobody
can see yet. Admissions hold (not_before) for the longest of:
- ttl_ms, after a loss the client knows of (recovered = '1'); capacity then
  starts at the resume level;
- ttl_ms less the Redis server's uptime (INFO server), when the server
  started less than ttl_ms ago and restart_hold is '1': whatever it held
  before its restart is gone, and its holders may still believe (not with
  an injected clock: a simulated clock has no server age);
- notice_ms when other clients listen: they renew on the announcement.
Otherwise (a first use on a server up longer than ttl_ms, nobody
listening) there is no hold.
]]

local epoch = arg_id(3, 'epoch')
local recovered = ARGV[4] == '1'
local fence_floor = arg_int(5, 'fence_floor')
local ttl = arg_int(6, 'ttl_ms')
local listening = ARGV[7] == '1'
local notice = arg_int(8, 'notice_ms')
local restart_hold = ARGV[9] == '1'
local cfg, raw = parse_config(10)
clock()
check_types()
if load_all() then return {SCHEMA, 'exists', S.epoch, unpack(config_pairs())} end

-- How long ago the server started, in ms (nil: not known, or an injected clock).
local function server_age()
  if ARGV[1] ~= '' or not restart_hold then return nil end
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then return nil end
  local seconds = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
  return seconds and seconds * 1000
end

-- A fresh state. Fences keep growing across a loss: they restart above the
-- clock (in microseconds' worth of grants per ms) and above any fence the
-- client saw. What a lost state left in the other keys goes.
redis.call('DEL', K.state, K.config, K.policy, K.aging, K.shares)  -- tags start again at vtime 0 (held: recount())
created(K.state)
S = {}
set('state', 'schema', SCHEMA)
set('state', 'epoch', epoch)
set('state', 'created', NOW)
set('state', 'fence', math.max(fence_floor, NOW * 1000))
for _, vtime in ipairs(VTIMES) do set('state', vtime, 0) end
set('state', 'aging_due', 0)
set('state', 'park_seq', 0)
set('state', 'event_seq', 0)
set('state', 'quota_exhausted', 0)
set('state', 'quota_at', 0)
set('state', 'touch_due', 0)
set('state', 'reclaim_due', 0)
set('state', 'capacity', cfg.max_capacity)
apply_config(cfg, raw)
local others = redis.call('PUBLISH', CHANNEL, epoch)
if listening then others = others - 1 end
local age = server_age()
local hold, why = 0, nil
if recovered then
  hold, why = ttl, 'state was lost (Redis restart, flush or expiry)'
elseif age and age < ttl then
  hold, why = ttl - age, 'Redis started ' .. age .. ' ms ago (a restart loses what it held)'
end
if others > 0 and notice > hold then
  hold, why = notice, 'created while ' .. others .. ' other clients listen'
end
if recovered then set('state', 'capacity', resume_level()) end
if hold > 0 then
  set('state', 'not_before', NOW + hold)
  log(recovered and 'recreate' or 'create', 'until', NOW + hold, 'listeners', others,
    'why', why .. ': holding ' .. hold .. ' ms for holders to re-register')
else
  log('create', 'why', 'first use')
end
save()
touch_all()
return finish({SCHEMA, 'created', epoch, unpack(config_pairs())})
