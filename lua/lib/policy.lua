--[[ lib/policy.lua: the policies, one entry each in Policy.POLICIES.

Uses lib/common.lua, lib/capacity.lua.
Defines: Policy (POLICIES, the_policy, record, no_news), one main-chunk
local; everything else lives in the do-block below.
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

local Policy = {}
do
  -- Change capacity (never above max_capacity) and log why.
  local function set_capacity(capacity, why, rl, total, ...)
    capacity = math.max(0, math.min(capacity, C.max_capacity))
    if capacity ~= S.capacity then
      local before = S.capacity
      set('state', 'capacity', capacity)
      log('capacity', 'from', before, 'why', why, 'window_rate_limited', rl, 'window_attempts', total, ...)
    end
  end

  local function policy_pause(why, rl, total)
    local before = S.capacity
    Capacity.pause('policy', 'waiting for provider rate-limit recovery', 0)
    log('pause', 'from', before, 'why', why, 'window_rate_limited', rl, 'window_attempts', total)
  end

  local POLICIES = {}
  Policy.POLICIES = POLICIES
  -- What the_policy() reads of the config first; the streak, as a read list.
  local POLICY_CONFIG = {'policy', 'max_capacity'}  -- (what tells a quiet success)
  local STREAK = {'streak'}

  -- The longest wait between probes refused at the same level: half a window,
  -- or longer when the window's attempts are few (a refused probe then costs
  -- at most 1 % of the attempts: the time of 100 at the window's rate), never
  -- more than two windows (a risen limit is still found within about two).
  local function probe_cap(total)
    return math.max(C.probe_ms, math.floor(C.window_ms / 2), math.min(2 * C.window_ms, math.floor(100 * C.window_ms / total)))
  end

  -- The seed's rule for a new max_capacity (and the fixed policy's): capacity
  -- at the new max at once, up or down.
  local function at_max()
    set('state', 'capacity', C.max_capacity)
    set('policy', 'streak', 0)
  end

  -- seed: the seed governor's rules exactly.
  POLICIES.seed = {
    config = {'decrease_count', 'decrease_ratio', 'ratio_min_attempts', 'decrease_factor', 'pause_count',
      'increase_successes'},
    state = {},
    reset = function() end,
    limited = function(rl, total)
      if rl >= C.pause_count then
        policy_pause(rl .. ' rate-limited attempts in the window', rl, total)
      elseif rl >= C.decrease_count or (total >= C.ratio_min_attempts and rl / total > C.decrease_ratio) then
        set_capacity(math.max(1, math.floor(S.capacity * C.decrease_factor)), 'rate-limited: decrease', rl, total)
      end
    end,
    success = function(rl, total)
      set('policy', 'streak', P.streak + 1)
      if P.streak >= C.increase_successes then
        set('policy', 'streak', 0)
        set_capacity(S.capacity + 1, C.increase_successes .. ' successes in a row: increase', rl, total)
      end
    end,
    new_max = function() at_max() end,  -- the seed's rule: capacity = max_capacity at once, up or down
  }

  -- The adaptive policy's probe: due after probe_wait just below the ceiling
  -- (backed off while refused); at or above it (the limit rose) every half
  -- interval, the step doubling while the provider keeps accepting.
  local function probe_due(waited)
    local since = NOW - P.probe_at
    if waited and waited < since then since = waited end
    return since >= (S.capacity < P.ceiling and P.probe_wait or math.floor(C.probe_ms / 2))
  end

  local function probe(why, rl, total)
    set('policy', 'streak', 0)
    set('policy', 'climbing', 0)
    if S.capacity >= P.ceiling then set('policy', 'probe_wait', C.probe_ms) end
    set('policy', 'probe_at', NOW)
    local step = P.probe_step
    set('policy', 'probe_step', math.min(P.probe_step * 2, C.max_capacity))
    set_capacity(S.capacity + step, why, rl, total, 'ceiling', P.ceiling, 'step', step)
  end

  -- The highest refusal share of the window read as the provider's
  -- background (refusals whatever this fleet's load: another tenant's
  -- traffic, a shared quota, an overload); above it a refusal below the
  -- ceiling is always the fleet's load.
  local NOISE_MAX = 0.2
  -- How long after a cut a refusal may still undo it (windows): later, the
  -- cut is old news and a refusal is judged afresh.
  local VERDICT_WINDOWS = 4

  -- The refusals among `n` attempts the background explains: its share of
  -- them and two standard deviations (none while no background was seen).
  local function explained(share, n)
    local expected = share * n
    return expected + 2 * math.sqrt(expected)
  end

  -- Whether a refusal may still undo the last cut (within a few windows of it).
  local function verdict_open()
    return P.cut_level > 0 and NOW - P.cut_at < VERDICT_WINDOWS * C.window_ms
  end

  local function percent(share)
    return string.format('%.1f %%', 100 * share)
  end

  -- A refusal that moves nothing, and why.
  local function no_cut(why, rl, total, level)
    log('refused', 'why', why, 'window_rate_limited', rl, 'window_attempts', total, 'level', level,
      'ceiling', P.ceiling, 'background_ppm', P.background_ppm)
    return false
  end

  -- A refusal below the ceiling the background does not explain: cut by
  -- cut_factor, remember what the cut can be undone to (the background may
  -- still have caused it) and count the round in flight at the cut (the
  -- leases admitted together with the refused one).
  local function cut(capacity, ceiling, why, level, rl, total, fence)
    set('policy', 'cut_from', S.capacity)
    set('policy', 'cut_ceiling', P.ceiling)
    set('policy', 'cut_level', level)
    set('policy', 'cut_at', NOW)
    set('policy', 'cut_share_ppm', 0)
    set('policy', 'round_fence', S.fence)
    set('policy', 'round_refused', 1)
    set('policy', 'ceiling', ceiling)
    set('policy', 'cut_fence', S.fence)
    set('policy', 'probe_at', NOW)
    set('policy', 'probe_step', 1)
    set('policy', 'probe_wait', C.probe_ms)
    set('policy', 'climbing', 1)  -- a refusal before the next probe may mean lower still
    set_capacity(math.max(1, capacity), why, rl, total, 'level', level, 'ceiling', ceiling,
      'lease_fence', fence or '', 'probe_wait', C.probe_ms)
    return true
  end

  -- adaptive (the default): a slow start from the resume level; the lowest
  -- in-flight level the provider refused (ceiling) is learnt and capacity
  -- held just below it; probes step above it now and then; refused below it
  -- more than the provider's background explains (the limit fell): one cut
  -- per congestion episode by cut_factor, down to the accepted count of a
  -- round that came back mostly refused. No news is not bad news: without
  -- reports, time at capacity with nothing refused grows it (no_news).
  POLICIES.adaptive = {
    config = {'pause_count', 'pause_ratio', 'increase_successes', 'cut_factor', 'probe_ms'},
    state = {'ceiling', 'cut_fence', 'probe_at', 'probe_step', 'probe_wait', 'climbing'},
    later = {'background_ppm', 'cut_from', 'cut_ceiling', 'cut_level', 'cut_at', 'cut_share_ppm', 'round_fence',
      'round_refused'},
    reset = function()
      set('policy', 'ceiling', 0)
      set('policy', 'cut_fence', S.fence)
      set('policy', 'probe_at', NOW)
      set('policy', 'probe_step', 1)
      set('policy', 'probe_wait', C.probe_ms)
      set('policy', 'climbing', 0)
      set('policy', 'background_ppm', 0)
      set('policy', 'cut_from', 0)
      set('policy', 'cut_ceiling', 0)
      set('policy', 'cut_level', 0)
      set('policy', 'cut_at', 0)
      set('policy', 'cut_share_ppm', 0)
      set('policy', 'round_fence', 0)
      set('policy', 'round_refused', 0)
      -- A new governor, a reset, a state re-created after a loss: no blind
      -- burst of max_capacity; discover the limit from the resume level. Each
      -- success adds one (success() below, nothing refused yet): a round of
      -- leases that all succeed doubles capacity, as in TCP's slow start, so
      -- max_capacity is reached after about log2(1 / resume_fraction) rounds;
      -- without reports it doubles every probe interval (no_news() below).
      -- No entry of its own in the decision log: the create, recreate or
      -- reset entry that follows carries the capacity it starts at.
      set('state', 'capacity', math.min(S.capacity, Capacity.resume_level()))
    end,
    -- A refusal's Retry-After holds the whole fleet when the refusal says
    -- the fleet as a whole is over (true: a storm, a cut, a round mostly
    -- refused); a refused probe and a refusal the background explains cost
    -- only their call (false), whose caller waits the delay out alone.
    limited = function(rl, total, fence)
      local live = in_flight()
      local level = S.capacity
      if live > 0 then level = math.max(1, math.min(live, S.capacity)) end
      if fence ~= nil and fence <= P.cut_fence then
        -- A lease admitted before the last cut (or refused probe): counted
        -- in it. One of the round in flight at the last cut is counted in
        -- that round: when most of it comes back refused, the count it
        -- accepted is where the limit is.
        if P.cut_level == 0 or fence > P.round_fence then return false end
        set('policy', 'round_refused', P.round_refused + 1)
        local accepted = math.max(1, P.cut_level - P.round_refused)
        if accepted >= S.capacity or P.round_refused <= math.max(P.cut_level / 4,
          1 + explained(P.background_ppm / 1e6, P.cut_level)) then
          return false  -- not most of it: no more than the background and a cut explain
        end
        set('policy', 'ceiling', math.min(P.ceiling, accepted + 1))
        set_capacity(accepted, P.round_refused .. ' of ' .. P.cut_level
          .. ' in flight at the cut refused: down to the accepted count', rl, total, 'level', P.cut_level,
          'ceiling', P.ceiling, 'lease_fence', fence)
        return true
      end
      if level <= 1 and rl >= C.pause_count and rl >= C.pause_ratio * total then
        -- Refused even at one in flight, most attempts refused: a real storm.
        set('policy', 'cut_fence', S.fence)
        set('policy', 'cut_level', 0)
        policy_pause('rate-limited share ' .. string.format('%.2f', rl / total) .. ' of ' .. total
          .. ' attempts at one in flight', rl, total)
        return true
      end
      local share = rl / total
      if P.ceiling > 0 and level >= P.ceiling and P.climbing == 0 then
        -- A probe refused: back just below the level it was refused at; at
        -- the level refused before, probe less often. It costs that call.
        local wait = C.probe_ms
        if level == P.ceiling then wait = math.min(P.probe_wait * 2, probe_cap(total)) end
        set('policy', 'ceiling', level)
        set('policy', 'cut_fence', S.fence)
        if not verdict_open() then
          -- the round in flight with it: mostly refused, it lands as a cut's
          set('policy', 'cut_level', level)
          set('policy', 'round_fence', S.fence)
          set('policy', 'round_refused', 1)
        end
        set('policy', 'probe_at', NOW)
        set('policy', 'probe_step', 1)
        set('policy', 'probe_wait', wait)
        set_capacity(math.max(1, level - 1), 'rate-limited at ' .. level .. ' in flight, a probe: back below it',
          rl, total, 'level', level, 'ceiling', level, 'lease_fence', fence or '', 'probe_wait', wait)
        return false
      end
      if rl <= explained(P.background_ppm / 1e6, total) then
        -- No more refusals in the window than the background explains: no cut.
        return no_cut('refused at ' .. level .. ' in flight, background refusal share '
          .. percent(P.background_ppm / 1e6) .. ': no cut', rl, total, level)
      end
      local since = NOW - P.cut_at
      if verdict_open() and share <= NOISE_MAX then
        -- Refused again within a few windows of a cut, at a share the
        -- background could explain: a lower limit, or the background?
        if since < C.window_ms then
          return no_cut('refused at ' .. level .. ' in flight ' .. since .. ' ms after a cut, refusal share '
            .. percent(share) .. ': a window to tell the background from a lower limit', rl, total, level)
        end
        local ppm = math.floor(share * 1e6)
        if P.round_refused > 1 + explained(share, P.cut_level) then
          -- The round in flight at the cut was refused more than this share
          -- explains: the fleet's load. The cut stands; judged afresh now.
          set('policy', 'cut_level', 0)
        elseif P.cut_share_ppm == 0 then
          -- A window at the level the cut left, refused at this share: one
          -- level lower for a window, to compare (a share that falls with
          -- the level is the fleet's load; one that stays, the background).
          set('policy', 'cut_share_ppm', ppm)
          set('policy', 'cut_at', NOW)
          set('policy', 'cut_fence', S.fence)
          set('policy', 'probe_at', NOW + C.window_ms)  -- held there a window (success())
          set('policy', 'climbing', 1)
          set_capacity(math.max(1, math.floor(level * C.cut_factor)), 'refused at ' .. level
            .. ' in flight a window after a cut, share ' .. percent(share) .. ': a level lower, to compare',
            rl, total, 'level', level, 'ceiling', P.ceiling)
          return false
        elseif ppm * 2 < P.cut_share_ppm then
          -- The share fell with the level: the fleet's load; the cuts stand.
          set('policy', 'cut_level', 0)
          return no_cut('refused at ' .. level .. ' in flight, share ' .. percent(share) .. ' down from '
            .. percent(P.cut_share_ppm / 1e6) .. ' a level higher: the fleet\'s load, the cut stands', rl, total, level)
        else
          -- A level lower, refused as often: the cuts bought nothing. The
          -- share is the background's (the mean of the last estimate and
          -- this share); undo them.
          if P.background_ppm > 0 then ppm = math.floor((P.background_ppm + ppm) / 2) end
          set('policy', 'background_ppm', ppm)
          -- (a cut of the slow start: its level, not a slow start again)
          set('policy', 'ceiling', P.cut_ceiling > 0 and P.cut_ceiling or P.cut_level)
          set('policy', 'cut_level', 0)
          set('policy', 'climbing', 0)
          set('policy', 'probe_at', NOW)
          set('policy', 'probe_wait', C.probe_ms)
          set_capacity(math.max(S.capacity, P.cut_from), 'refused at ' .. level .. ' in flight, share '
            .. percent(share) .. ' as a level higher: background refusal share ' .. percent(ppm / 1e6)
            .. ', cut undone', rl, total, 'level', level, 'ceiling', P.ceiling, 'background_ppm', P.background_ppm)
          return false
        end
      end
      if P.climbing == 1 and P.ceiling > 0 then
        -- Refused again climbing back after a cut: the limit is lower still.
        local capacity = math.floor(level * C.cut_factor)
        return cut(capacity, capacity + 1, 'rate-limited at ' .. level .. ' in flight again after a cut: cut',
          level, rl, total, fence)
      end
      -- Refused below the lowest level refused so far (or the first 429).
      return cut(math.floor(level * C.cut_factor), level, 'rate-limited at ' .. level .. ' in flight: cut',
        level, rl, total, fence)
    end,
    -- At the max a success changes nothing: the streak is 0 there (every
    -- capacity change clears it, and new_max() when it leaves capacity at the
    -- max), so a quiet success reads none of the policy's state.
    quiet = function() return S.capacity >= C.max_capacity end,
    quiet_state = {},
    success = function(rl, total)
      if S.capacity >= C.max_capacity then return end
      set('policy', 'streak', P.streak + 1)
      if P.probe_at > NOW then
        -- A window held a level lower, to compare the share refused there
        -- with the share a level higher (limited()): no growth, no probe.
        return
      elseif P.ceiling == 0 or S.capacity + 1 < P.ceiling then
        -- Nothing refused yet (the slow start: one more per success doubles
        -- capacity per round of leases), or below the ceiling: one more.
        set('policy', 'streak', 0)
        set_capacity(S.capacity + 1, 'success below the ceiling: increase', rl, total, 'ceiling', P.ceiling)
      elseif P.streak >= C.increase_successes and probe_due() then
        probe('probe above the ceiling', rl, total)
      end
    end,
    no_news = function(waited)
      if P.ceiling == 0 then
        -- The slow start without reports: every probe interval spent with
        -- callers waiting at capacity and nothing refused doubles capacity.
        local since = math.min(NOW - P.probe_at, waited)
        if since < C.probe_ms then return nil end
        return function(rl, total)
          set('policy', 'probe_at', NOW)
          set_capacity(S.capacity * 2, 'nothing refused for ' .. since .. ' ms, callers waiting at capacity: double',
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
      if S.capacity > C.max_capacity then set('state', 'capacity', C.max_capacity) end
      if S.capacity >= C.max_capacity then set('policy', 'streak', 0) end  -- at the max the streak is 0 (quiet)
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
      set('policy', 'streak', P.streak + 1)
    end,
    new_max = function() at_max() end,
  }

  -- The fields of `later` not read yet, absent as 0 (a state an older client
  -- created has none of them yet); each present one checked as any field.
  local function read_later(fields)
    local into = values('policy')
    local raw = redis.call('HMGET', K.policy, unpack(fields))
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
  function Policy.the_policy(outcome)
    local policy = POLICIES[more_of('config', POLICY_CONFIG).policy]
    if not policy then fail('BADSTATE', 'field policy holds ' .. string.format('%q', C.policy)) end
    if outcome == 's' and S.capacity > 0 and policy.quiet and policy.quiet() then
      more_of('policy', policy.quiet_state)
      return policy, true
    end
    more('config', unpack(policy.config))
    more('policy', 'streak', unpack(policy.state))
    if outcome == 'r' and policy.later then read_later(policy.later) end
    return policy, false
  end

  -- Record one reported attempt and apply the policy. outcome is 's'
  -- (success), 'r' (rate-limited) or 'e' (other error); rl and total are the
  -- window's counts before it (window(); rl may be nil for a quiet success).
  -- Needs the state's capacity, fence and event_seq; `policy` is
  -- the_policy()'s, called before the first write. Returns, for a refusal,
  -- whether it holds the whole fleet (its Retry-After): false only when the
  -- policy says it costs the call alone (limited() above).
  function Policy.record(policy, outcome, fence, rl, total, fresh)
    S.event_seq = redis.call('HINCRBY', K.state, 'event_seq', '1')  -- read and checked by the caller
    local member, at = int(S.event_seq) .. ':' .. outcome, NOW_S
    if outcome == 'r' then
      redis.call('ZADD', K.limited, at, member)
      if rl == 0 then created(K.limited) end
      rl = rl + 1
    end
    redis.call('ZADD', K.attempts, at, member)
    if fresh then created(K.attempts) end
    if total then total = total + 1 end
    if outcome == 'r' then
      set('policy', 'streak', 0)
      if S.capacity > 0 then return policy.limited(rl, total, fence) ~= false end  -- 429s while paused change nothing
      return true
    elseif S.capacity == 0 then
      Capacity.recover(rl)
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
  -- S.capacity and S.not_before.
  function Policy.no_news()
    if S.capacity == 0 or NOW < S.not_before then return nil end
    local policy = Policy.the_policy()
    if not policy.no_news then return nil end
    more('config', 'log_length')
    if S.capacity >= C.max_capacity or in_flight() < S.capacity then return nil end
    local head = redis.call('ZRANGE', K.queue, 0, 0)[1]
    if not head or (tonumber(redis.call('ZSCORE', K.waiters, head)) or 0) <= NOW then return nil end
    local m = record_parse(redis.call('HGET', K.holders, head))
    if not m then return nil end
    local grow = policy.no_news(NOW - m.since)
    if not grow then return nil end
    local rl, total = window()
    if rl > 0 then return nil end
    guard(K.events)  -- a growth step is logged
    return function() grow(rl, total) end
  end
end
