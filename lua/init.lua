--[[ init.lua: create a governor's state from a client's config if missing.

Uses    lib/admission.lua, lib/admin.lua, lib/config.lua (after lib/common.lua)
KEYS    the governor's eight keys, see lib/common.lua
ARGV
  ARGV[1] now          int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel      string        where grants to waiters are announced
  ARGV[3] epoch        string        random id of the new state
  ARGV[4] recovered    '1' | '0'     '1' if the client saw this governor before
  ARGV[5] fence_floor  int >= 0      highest fence the client has seen
  ARGV[6] hold_ms      int ms >= 0   admission hold after a known loss
  ARGV[7] listening    '1' | '0'     '1' if the calling client itself listens
  ARGV[8] notice_ms    int ms >= 0   hold when others listen (a loss unknown to the caller)
  ARGV[9..] config     name, value pairs (see config_fields in lib/config.lua)
Reply
  {1, 'created', epoch}   a new state was written
  {1, 'exists', epoch}    the state was there already; nothing changed

Every other script answers {1, 'missing'} when the state hash is gone (a
first use, Redis restarted without persistence, FLUSHDB, idle expiry); the
client then runs this script and calls again. The new state is announced
on the channel (a message holding only the epoch): every listening client
renews its leases at once, and renew.lua adopts those of a lost state.
After a loss the client knows of (recovered = '1') the governor starts
cautiously: admissions hold for hold_ms, long enough for every running
holder's heartbeat, and capacity starts at the resume level. A client that
cannot know (it never saw the state) still holds for notice_ms when other
clients listen, so their holders count again before anyone new is
admitted: a lost governor never comes back unlimited.
]]

local epoch = arg_id(3, 'epoch')
local recovered = ARGV[4] == '1'
local fence_floor = arg_int(5, 'fence_floor')
local hold = arg_int(6, 'hold_ms')
local listening = ARGV[7] == '1'
local notice = arg_int(8, 'notice_ms')
local cfg, raw = parse_config(9)
check_types()
if load_state() then return {SCHEMA, 'exists', S.epoch} end

-- Fences keep growing across a loss: they restart above the clock (in
-- microseconds' worth of grants per ms) and above any fence the client saw.
S = {fence = math.max(fence_floor, NOW * 1000)}
DIRTY = {fence = true}
set('schema', SCHEMA)
set('epoch', epoch)
set('created', NOW)
set('ticket', 0)
set('evseq', 0)
set('quota_count', 0)
set('quota_at', 0)
set('touch_due', 0)
set('reclaim_due', 0)
apply_config(cfg, raw)
local others = redis.call('PUBLISH', CHANNEL, epoch)
if listening then others = others - 1 end
if recovered then
  set('cap', resume_level())
  set('not_before', NOW + hold)
  log('recreate', 'until', NOW + hold,
    'why', 'state was lost (Redis restart, flush or expiry): holding ' .. hold .. ' ms for holders to re-register')
elseif others > 0 then
  set('not_before', NOW + notice)
  log('create', 'until', NOW + notice, 'listeners', others,
    'why', 'created while other clients listen: holding ' .. notice .. ' ms for their holders to re-register')
else
  log('create', 'why', 'first use')
end
-- The HOT fields go in first: a small hash is a listpack, scanned from the
-- front on every lookup, and every script reads these (HOT, lib/common.lua).
local first = {}
for _, f in ipairs(HOT) do
  local v = rawget(S, f)
  first[#first + 1] = f
  first[#first + 1] = STORE[f] or v
end
redis.call('HSET', K.state, unpack(first))
touch_all()
return finish({SCHEMA, 'created', epoch})
