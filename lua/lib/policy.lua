--[[ lib/policy.lua: the policies, one entry each in POLICIES.

Uses lib/common.lua, lib/numbers.lua, lib/fields.lua, lib/decisions.lua, lib/records.lua, lib/capacity.lua.
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
  reset()            a fresh learnt state into P (capacity is set by the caller;
                     a policy may lower it: a config stored afresh)
  limited(rl, total, fence)   a rate-limited attempt, not paused
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

-- The adaptive policy's probe: due after probe_wait just below the ceiling
-- (backed off while refused); at or above it (the limit rose) every half
-- interval, the step doubling while the provider keeps accepting.
local function probe_due(waited)
  local since = NOW - POLICY.probe_at
  if waited and waited < since then since = waited end
  return since >= (STATE.capacity < POLICY.ceiling and POLICY.probe_wait or math.floor(CONFIG.probe_ms / 2))
end

local function probe(why, rl, total)
  set('policy', 'streak', 0)
  set('policy', 'climbing', 0)
  if STATE.capacity >= POLICY.ceiling then set('policy', 'probe_wait', CONFIG.probe_ms) end
  set('policy', 'probe_at', NOW)
  local step = POLICY.probe_step
  set('policy', 'probe_step', math.min(POLICY.probe_step * 2, CONFIG.max_capacity))
  set_capacity(STATE.capacity + step, why, rl, total, 'ceiling', POLICY.ceiling, 'step', step)
end

-- adaptive (the default): a slow start from the resume level; the lowest
-- in-flight level the provider refused (ceiling) is learnt and capacity
-- held just below it; probes step above it now and then; refused below it
-- (the limit fell): one cut per congestion episode by cut_factor. No news
-- is not bad news: without reports, time at capacity with nothing refused
-- grows it (no_news).
POLICIES.adaptive = {
  config = {'pause_count', 'pause_ratio', 'increase_successes', 'cut_factor', 'probe_ms'},
  state = {'ceiling', 'cut_fence', 'probe_at', 'probe_step', 'probe_wait', 'climbing'},
  reset = function()
    set('policy', 'ceiling', 0)
    set('policy', 'cut_fence', STATE.fence)
    set('policy', 'probe_at', NOW)
    set('policy', 'probe_step', 1)
    set('policy', 'probe_wait', CONFIG.probe_ms)
    set('policy', 'climbing', 0)
    -- A new governor, a reset, a state re-created after a loss: no blind
    -- burst of max_capacity; discover the limit from the resume level. Each
    -- success adds one (success() below, nothing refused yet): a round of
    -- leases that all succeed doubles capacity, as in TCP's slow start, so
    -- max_capacity is reached after about log2(1 / resume_fraction) rounds;
    -- without reports it doubles every probe interval (no_news() below).
    -- No entry of its own in the decision log: the create, recreate or
    -- reset entry that follows carries the capacity it starts at.
    set('state', 'capacity', math.min(STATE.capacity, resume_level()))
  end,
  limited = function(rl, total, fence)
    -- A lease admitted before the last cut was counted in that cut.
    if fence ~= nil and fence <= POLICY.cut_fence then return end
    local live = in_flight()
    local level = STATE.capacity
    if live > 0 then level = math.max(1, math.min(live, STATE.capacity)) end
    if level <= 1 and rl >= CONFIG.pause_count and rl >= CONFIG.pause_ratio * total then
      -- Refused even at one in flight, most attempts refused: a real storm.
      set('policy', 'cut_fence', STATE.fence)
      policy_pause('rate-limited share ' .. string.format('%.2f', rl / total) .. ' of ' .. total
        .. ' attempts at one in flight', rl, total)
      return
    end
    local capacity, ceiling, why
    local wait = CONFIG.probe_ms
    local probe = POLICY.ceiling > 0 and level >= POLICY.ceiling and POLICY.climbing == 0
    if probe then
      -- A probe refused: back just below the level it was refused at; at
      -- the level refused before, probe less often.
      capacity, ceiling = level - 1, level
      if level == POLICY.ceiling then wait = math.min(POLICY.probe_wait * 2, probe_cap(total)) end
      why = 'rate-limited at ' .. level .. ' in flight, a probe: back below it'
    elseif POLICY.climbing == 1 and POLICY.ceiling > 0 then
      -- Refused again climbing back after a cut: the limit is lower still.
      capacity = math.floor(level * CONFIG.cut_factor)
      ceiling = capacity + 1
      why = 'rate-limited at ' .. level .. ' in flight again after a cut: cut'
    else
      -- Refused below the lowest level refused so far (or the first 429).
      capacity, ceiling = math.floor(level * CONFIG.cut_factor), level
      why = 'rate-limited at ' .. level .. ' in flight: cut'
    end
    set('policy', 'ceiling', ceiling)
    set('policy', 'cut_fence', STATE.fence)
    set('policy', 'probe_at', NOW)
    set('policy', 'probe_step', 1)
    set('policy', 'probe_wait', wait)
    -- After a cut, a 429 before the next probe means the limit is lower still;
    -- after a refused probe it is only the next news.
    if not probe then set('policy', 'climbing', 1) end
    set_capacity(math.max(1, capacity), why, rl, total, 'level', level, 'ceiling', ceiling,
      'lease_fence', fence or '', 'probe_wait', wait)
  end,
  -- At the max a success changes nothing: the streak is 0 there (every
  -- capacity change clears it, and new_max() when it leaves capacity at the
  -- max), so a quiet success reads none of the policy's state.
  quiet = function() return STATE.capacity >= CONFIG.max_capacity end,
  quiet_state = {},
  success = function(rl, total)
    if STATE.capacity >= CONFIG.max_capacity then return end
    set('policy', 'streak', POLICY.streak + 1)
    if POLICY.ceiling == 0 or STATE.capacity + 1 < POLICY.ceiling then
      -- Nothing refused yet (the slow start: one more per success doubles
      -- capacity per round of leases), or below the ceiling: one more.
      set('policy', 'streak', 0)
      set_capacity(STATE.capacity + 1, 'success below the ceiling: increase', rl, total, 'ceiling', POLICY.ceiling)
    elseif POLICY.streak >= CONFIG.increase_successes and probe_due() then
      probe('probe above the ceiling', rl, total)
    end
  end,
  no_news = function(waited)
    if POLICY.ceiling == 0 then
      -- The slow start without reports: every probe interval spent with
      -- callers waiting at capacity and nothing refused doubles capacity.
      local since = math.min(NOW - POLICY.probe_at, waited)
      if since < CONFIG.probe_ms then return nil end
      return function(rl, total)
        set('policy', 'probe_at', NOW)
        set_capacity(STATE.capacity * 2, 'nothing refused for ' .. since .. ' ms, callers waiting at capacity: double',
          rl, total, 'ceiling', 0)
      end
    elseif probe_due(waited) then
      -- A ceiling learnt, but nothing refused for a window: the probe a
      -- streak of successes would make, due by time alone.
      return function(rl, total)
        probe('nothing refused in the window, callers waiting at capacity: probe', rl, total)
      end
    end
    return nil
  end,
  new_max = function(before)
    -- A lower max_capacity applies at once; a higher one is approached as
    -- any ceiling is (the slow start, probes): what was learnt is kept.
    if STATE.capacity > CONFIG.max_capacity then set('state', 'capacity', CONFIG.max_capacity) end
    if STATE.capacity >= CONFIG.max_capacity then set('policy', 'streak', 0) end  -- at the max the streak is 0 (quiet)
  end,
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

-- The governor's policy entry, and whether the call's outcome is a quiet
-- success: one that changes nothing but the policy's streak (no capacity
-- change, no log; the policy's quiet() says so from capacity and its
-- ceiling). Its config and state are read (C, P): for a quiet success
-- only streak, else every field of the policy's. Every field it needs is
-- checked present before the caller's first write.
local function the_policy(outcome)
  local policy = POLICIES[read_more_list('config', POLICY_CONFIG).policy]
  if not policy then fail('BADSTATE', 'field policy holds ' .. string.format('%q', CONFIG.policy)) end
  if outcome == 's' and STATE.capacity > 0 and policy.quiet and policy.quiet() then
    read_more_list('policy', policy.quiet_state)
    return policy, true
  end
  read_more('config', unpack(policy.config))
  read_more('policy', 'streak', unpack(policy.state))
  return policy, false
end

-- Record one reported attempt and apply the policy. outcome is 's'
-- (success), 'r' (rate-limited) or 'e' (other error); rl and total are the
-- window's counts before it (window(); rl may be nil for a quiet success).
-- Needs the state's capacity, fence and event_seq; `policy` is
-- the_policy()'s, called before the first write.
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
    if STATE.capacity > 0 then policy.limited(rl, total, fence) end  -- 429s while paused change nothing
  elseif STATE.capacity == 0 then
    recover(rl)
  elseif outcome == 's' then
    policy.success(rl, total)
  end
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
