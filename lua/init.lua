--[[ init.lua: create a governor's state from a client's config if missing.

Uses    lib/common.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua,
        lib/budgets.lua, lib/capacity.lua, lib/origin.lua, lib/queue.lua, lib/admin.lua,
        lib/config.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now          int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel      string        where grants to waiters are announced
  ARGV[3] epoch        string        random id of the new state
  ARGV[4] recovered    '1' | '0'     '1' if the client saw this governor before
  ARGV[5] fence_floor  int >= 0      highest fence the client has seen
  ARGV[6] ttl_ms       LEASE_TTL ms  the longest lease TTL the client knows of (its
                                     own, or a longer one the state recorded):
                                     how long a holder may go on believing in a
                                     lease unrenewed
  ARGV[7] listening    '1' | '0'     '1' if the calling client itself listens
  ARGV[8] notice_ms    DURATION ms   hold when others listen (a loss unknown to the caller)
  ARGV[9] strict       '1' | '0'     '1': hold on a server younger than ttl_ms (the
                                     strict mode, GovernorConfig.restart_hold); a
                                     'd' after it: the caller declares the server
                                     durable (GovernorConfig.durable_redis: stored as
                                     the state's durable, lib/origin.lua)
  ARGV[10..] config    name, value pairs (lib/config.lua): the config the
                       client last saw stored, else its own
Reply
  {SCHEMA, 'created', epoch, ttl_max, name1, value1, ...}   a new state was written
  {SCHEMA, 'exists', epoch, ttl_max, name1, value1, ...}    the state was there
  The pairs are the stored config (the exact stored strings); ttl_max the
  longest lease TTL any client announced (ms).

Every other script answers {SCHEMA, 'missing'} when the state hash is gone (a
first use, Redis restarted without persistence, FLUSHDB, idle expiry); the
client then runs this script and calls again. The new state is announced
on the channel (a message holding only the epoch): every listening client
renews its leases at once, and renew.lua adopts those of a lost state.
A state that exists records the caller's TTL (ttl_max: the longest
announced lately, note_ttl of lib/origin.lua), and gets its config and policy hashes again when either is gone
(GOVERNOR_MISSING from another script): the caller's config, what the
policy learnt starting over at the resume level.

A holder goes on believing in its lease for up to ttl_ms after its last
renewal, even cut off from Redis, so a new state may have holders nobody
can see yet. Admissions hold (the recovery hold, lib/origin.lua) only on
evidence that a fleet held this governor, for the longest of:
- ttl_ms, after a loss the client knows of (recovered = '1'); capacity then
  starts at the resume level;
- notice_ms when other clients listen: they renew on the announcement;
- in the strict mode only, ttl_ms less the Redis server's uptime (INFO
  server), when the server started less than ttl_ms ago: whatever it held
  before a restart is gone, and its holders may still believe (not with an
  injected clock: a simulated clock has no server age).
Otherwise (a first deployment, a fresh client nobody listens beside) the
state admits at once. A state that came back from elsewhere (a snapshot, a
promoted replica) is found by its origin stamp (lib/origin.lua).
]]

local epoch = arg_id(3, 'epoch')
local recovered = ARGV[4] == '1'
local fence_floor = arg_int(5, 'fence_floor')
local ttl = arg_in(6, 'ttl_ms')
local listening = ARGV[7] == '1'
local notice = arg_in(8, 'notice_ms')
local strict = string.sub(ARGV[9] or '', 1, 1) == '1'
local durable = string.sub(ARGV[9] or '', 2, 2) == 'd'
local cfg, raw = parse_config(10)
-- step: the keys
clock()
check_types()
-- step: a config or policy hash lost, stored again
if redis.call('EXISTS', KEY.state) == 1
  and (redis.call('EXISTS', KEY.config) == 0 or redis.call('EXISTS', KEY.policy) == 0) then
  -- The config or the policy hash lost while the state stayed: stored again
  -- from the caller's (the fleet's as it last saw it), learnt state anew.
  local lost = redis.call('EXISTS', KEY.config) == 0 and 'config' or 'policy'
  STATE = {}
  read_all(KEY.state, STATE)
  apply_config(cfg, raw)
  set('state', 'capacity', resume_level())
  log('repair', 'why', 'the ' .. lost .. ' hash was lost (evicted or deleted): the config stored again from a client')
  save()
end
-- step: a governor already there
if load_all() then
  note_ttl(ttl)
  if durable then set('state', 'durable', 1) end
  return finish({SCHEMA, 'exists', STATE.epoch, STATE.ttl_max, unpack(config_pairs())})
end

-- step: a new state
-- How long ago the server started, in ms (nil: not known, or an injected clock).
local function server_age()
  if ARGV[1] ~= '' or not strict then return nil end
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then return nil end
  local seconds = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
  return seconds and seconds * 1000
end

-- A fresh state. Fences keep growing across a loss: they restart above the
-- clock (in microseconds' worth of grants per ms) and above any fence the
-- client saw. What a lost state left in the other keys goes.
-- (the tags start again at vtime 0; held: recount())
redis.call('DEL', KEY.state, KEY.config, KEY.policy, KEY.aging, KEY.shares)
created(KEY.state)
STATE = {}
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
set('state', 'quota_until', 0)
set('state', 'spend_until', 0)
set('state', 'touch_due', 0)
set('state', 'reclaim_due', 0)
set('state', 'capacity', cfg.max_capacity)
local stamp, node = server_stamp()
set('state', 'origin', stamp)
set('state', 'origin_node', node)
set('state', 'ttl_max', ttl)
set('state', 'ttl_cur', ttl)
set('state', 'ttl_since', NOW)
set('state', 'hold_until', 0)
set('state', 'hold_reason', '')
set('state', 'durable', durable and 1 or 0)
apply_config(cfg, raw)
local others = redis.call('PUBLISH', CHANNEL, epoch)
if listening then others = others - 1 end
local age = server_age()
if recovered then
  hold_admissions(ttl, 'the state was lost (a Redis restart without it, a flush or an expiry) while a client held '
    .. 'leases or used it: holding ' .. ttl .. ' ms (the longest lease TTL known) for holders to re-register')
  set('state', 'capacity', resume_level())
end
if age and age < ttl then
  hold_admissions(ttl - age, 'strict mode: Redis started ' .. age .. ' ms ago (a restart loses what it held): holding '
    .. (ttl - age) .. ' ms for holders to re-register')
end
if others > 0 then
  hold_admissions(notice, 'created while ' .. others .. ' other clients listen: holding ' .. notice
    .. ' ms for them to re-register')
end
if STATE.hold_until > 0 then
  reborn()  -- what the fleet spent before the loss is not known
  log(recovered and 'recreate' or 'create', 'until', STATE.hold_until, 'listeners', others, 'why', STATE.hold_reason)
else
  log('create', 'why', 'first use: no evidence that a fleet held this governor, no hold')
end
save()
touch_all()
return finish({SCHEMA, 'created', epoch, ttl, unpack(config_pairs())})
