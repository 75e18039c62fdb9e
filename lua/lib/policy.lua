--[[ lib/policy.lua: the policies, one entry each in POLICIES.

Uses lib/common.lua, lib/numbers.lua, lib/fields.lua, lib/decisions.lua, lib/records.lua, lib/capacity.lua.
Defines: POLICIES, the_policy, record, no_news, set_capacity, policy_pause, probe_cap.
A policy is a unit: its entry here (its state fields, its reaction to a
rate-limited attempt and to a success, its reset), its config class in
governor/policies.py (its stored numbers, read here from C) and its entry in
tests/support/model.py. record() adds one attempt to the window (fresh: the
window's key is new, and gets its expiry) and hands it to the governor's policy.

Every policy's state lives in the policy hash (P); streak, the successes
in a row since the last change, is every policy's (pause and resume clear
it). Each entry:
  config             the policy's own fields of the config hash (C)
  state              the policy's own fields of the policy hash (P)
  later              (or none) fields added to the policy hash after it was
                     first stored: a refusal reads them, absent as 0 (a state
                     an older client created has none yet)
  reset()            a fresh learnt state into P (capacity is set by the caller;
                     a policy may lower it: a config stored afresh)
  limited(rl, total, fence)   a rate-limited attempt, not paused: true when
                     it says the fleet as a whole is over (its Retry-After
                     then holds the fleet), false when it costs only the
                     call (a refused probe, the provider's background)
  background(rl, total)       (or none) a refusal the provider says is no
                     load signal (outcome 'b'), not paused: counted as an
                     attempt only; it never holds the fleet. A policy
                     without it reads such a refusal as 'r'
  success(rl, total)          a success, not paused
  no_news(waited)    (or none) callers wait while every slot is taken, the
                     first in line for `waited` ms, nothing was refused in
                     the window and no Retry-After holds: nil, or the growth
                     by time due now, a function(rl, total) (no_news() below)
  new_max(before)    max_capacity changed from `before`, not paused
  quiet()            (or none) true when a success now changes nothing but the
                     policy's state fields listed in quiet_state (the only
                     ones a quiet success reads: the_policy() below)
rl and total are the window's counts with this attempt (nil for a quiet
success, which reads no window); fence is the reporting lease's fence,
or nil.
]]

-- Change capacity (never above max_capacity) and log why.
local function set_capacity(capacity, why, rl, total, ...)
  capacity = math.max(0, math.min(capacity, CONFIG.max_capacity))
  if capacity ~= STATE.capacity then
    local before = STATE.capacity
    set('state', 'capacity', capacity)
    log('capacity', 'from', before, 'why', why, 'window_rate_limited', rl, 'window_attempts', total, ...)
  end
end

local function policy_pause(why, rl, total)
  local before = STATE.capacity
  pause('policy', 'waiting for provider rate-limit recovery', 0)
  log('pause', 'from', before, 'why', why, 'window_rate_limited', rl, 'window_attempts', total)
end

local POLICIES = {}
-- What the_policy() reads of the config first; the streak, as a read list.
local POLICY_CONFIG = {'policy', 'max_capacity'}  -- (what tells a quiet success)
local STREAK = {'streak'}

-- The longest wait between probes refused at the same level: half a window,
-- or longer when the window's attempts are few (a refused probe then costs
-- at most 1 % of the attempts: the time of 100 at the window's rate), never
-- more than two windows (a risen limit is still found within about two).
local function probe_cap(total)
  return math.max(CONFIG.probe_ms, math.floor(CONFIG.window_ms / 2), math.min(2 * CONFIG.window_ms, math.floor(100 * CONFIG.window_ms / total)))
end

-- The seed's rule for a new max_capacity (and the fixed policy's): capacity
-- at the new max at once, up or down.
local function at_max()
  set('state', 'capacity', CONFIG.max_capacity)
  set('policy', 'streak', 0)
end

-- seed: the seed governor's rules exactly.
POLICIES.seed = {
  config = {'decrease_count', 'decrease_ratio', 'ratio_min_attempts', 'decrease_factor', 'pause_count',
    'increase_successes'},
  state = {},
  reset = function() end,
  limited = function(rl, total)
    if rl >= CONFIG.pause_count then
      policy_pause(rl .. ' rate-limited attempts in the window', rl, total)
    elseif rl >= CONFIG.decrease_count or (total >= CONFIG.ratio_min_attempts and rl / total > CONFIG.decrease_ratio) then
      set_capacity(math.max(1, math.floor(STATE.capacity * CONFIG.decrease_factor)), 'rate-limited: decrease', rl, total)
    end
  end,
  success = function(rl, total)
    set('policy', 'streak', POLICY.streak + 1)
    if POLICY.streak >= CONFIG.increase_successes then
      set('policy', 'streak', 0)
      set_capacity(STATE.capacity + 1, CONFIG.increase_successes .. ' successes in a row: increase', rl, total)
    end
  end,
  new_max = function() at_max() end,  -- the seed's rule: capacity = max_capacity at once, up or down
}


-- fixed: capacity stays at max_capacity; nothing is learnt.
POLICIES.fixed = {
  config = {},
  state = {},
  reset = function() end,
  limited = function() end,
  quiet = function() return true end,
  quiet_state = STREAK,
  success = function()
    set('policy', 'streak', POLICY.streak + 1)
  end,
  new_max = function() at_max() end,
}

-- The fields of `later` not read yet, absent as 0 (a state an older client
-- created has none of them yet); each present one checked as any field.
local function read_later(fields)
  local into = fields_of('policy')
  local raw = redis.call('HMGET', KEY.policy, unpack(fields))
  for i = 1, #fields do
    if into[fields[i]] == nil then into[fields[i]] = raw[i] and checked(fields[i], raw[i]) or 0 end
  end
end

-- The governor's policy entry, and whether the call's outcome is a quiet
-- success: one that changes nothing but the policy's streak (no capacity
-- change, no log; the policy's quiet() says so from capacity and its
-- ceiling). Its config and state are read (C, P): for a quiet success
-- only streak, else every field of the policy's (and for a refusal its
-- `later` ones). Every field it needs is read before the caller's first
-- write.
local function the_policy(outcome)
  local policy = POLICIES[read_more_list('config', POLICY_CONFIG).policy]
  if not policy then fail('BADSTATE', 'field policy holds ' .. string.format('%q', CONFIG.policy)) end
  if outcome == 's' and STATE.capacity > 0 and policy.quiet and policy.quiet() then
    read_more_list('policy', policy.quiet_state)
    return policy, true
  end
  read_more('config', unpack(policy.config))
  read_more('policy', 'streak', unpack(policy.state))
  if (outcome == 'r' or outcome == 'b') and policy.later then read_later(policy.later) end
  return policy, false
end

-- Record one reported attempt and apply the policy. outcome is 's'
-- (success), 'r' (rate-limited), 'b' (rate-limited, no load signal: an
-- attempt of the window, not one of its refusals; only for a policy with
-- a background() rule) or 'e' (other error); rl and total are the
-- window's counts before it (window(); rl may be nil for a quiet success).
-- Needs the state's capacity, fence and event_seq; `policy` is
-- the_policy()'s, called before the first write. Returns, for a refusal,
-- whether it holds the whole fleet (its Retry-After): false only when the
-- policy says it costs the call alone (limited() above).
local function record(policy, outcome, fence, rl, total, fresh)
  STATE.event_seq = redis.call('HINCRBY', KEY.state, 'event_seq', '1')  -- read and checked by the caller
  local member, at = int(STATE.event_seq) .. ':' .. outcome, NOW_S
  if outcome == 'r' then
    redis.call('ZADD', KEY.limited, at, member)
    if rl == 0 then created(KEY.limited) end
    rl = rl + 1
  end
  redis.call('ZADD', KEY.attempts, at, member)
  if fresh then created(KEY.attempts) end
  if total then total = total + 1 end
  if outcome == 'r' then
    set('policy', 'streak', 0)
    if STATE.capacity > 0 then return policy.limited(rl, total, fence) ~= false end  -- 429s while paused change nothing
    return true
  elseif outcome == 'b' then
    if STATE.capacity > 0 then policy.background(rl, total) end
    return false
  elseif STATE.capacity == 0 then
    recover(rl)
  elseif outcome == 's' then
    policy.success(rl, total)
  end
  return true
end

-- No news is not bad news: callers wait while every slot is taken, no
-- Retry-After holds and no rate-limited attempt is in the window, so the
-- policy's no_news() may grow capacity by time, whether or not callers
-- report (a lease may live for hours and end without a report). How long
-- the demand has waited is the head waiter's wait (its holder record's
-- since): a level's time counts only while someone waits at it. Run by
-- refresh and probe; it reads what it needs before the caller's first
-- write and returns the function that applies it (after), or nil. Needs
-- STATE.capacity and STATE.not_before.
local function no_news()
  if STATE.capacity == 0 or NOW < STATE.not_before then return nil end
  local policy = the_policy()
  if not policy.no_news then return nil end
  read_more('config', 'log_length')
  if STATE.capacity >= CONFIG.max_capacity or in_flight() < STATE.capacity then return nil end
  local head = redis.call('ZRANGE', KEY.queue, 0, 0)[1]
  if not head or (tonumber(redis.call('ZSCORE', KEY.waiters, head)) or 0) <= NOW then return nil end
  local m = record_parse(redis.call('HGET', KEY.holders, head))
  if not m then return nil end
  local grow = policy.no_news(NOW - m.since)
  if not grow then return nil end
  local rl, total = window()
  if rl > 0 then return nil end
  guard(KEY.events)  -- a growth step is logged
  return function() grow(rl, total) end
end
