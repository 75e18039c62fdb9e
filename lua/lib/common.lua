--[[ lib/common.lua: the prelude of the governor's functions library.

governor/scripts.py builds one Redis Functions library from: the
blueprint generated from governor/protocol.py, governor/budgets.py and
governor/policies.py (SCHEMA, the keys' names and types, the budget kinds
and their costs, each class's vtime field, the base config fields, the
status fields, HOT, FIELDS: every stored field's kind, REQUIRED: see
field_table() there), this file, the fragments of lua/lib/ (one per
concern, in the order of governor/scripts.py FRAGMENTS), then each
operation's file as the body of OPS.<operation>, registered as a function.
Redis runs the library's top level once, when it loads it; each call runs
begin(keys, argv) of lib/call.lua, then the operation.

One scope per concern. This file's names are the library's main chunk's:
Redis's API, the per-call state every fragment reads and the call resets,
fail() and memo(). Each fragment is a scope of its own (a do-block that
governor/scripts.py wraps around the file, on its first and last lines,
so its lines keep their numbers): its top-level names are its own, and
the library keeps a table named after the file holding them (budgets,
shares, ...). A file's "Uses" line names the fragments it uses, all above
it; the library binds each name the file uses from those to a local of
its scope (an upvalue of its functions, as fast as a name of this file),
and nothing else: a name of another fragment that is not on the Uses line
is not there (tests/test_protocol.py checks the lines,
tests/test_lua_layout.py the main chunk's locals: Lua 5.1 allows 200).

KEYS: on a standalone Redis a function receives one key, the governor's
state key (governor.protocol.GovernorKeys.script_keys): "<base>state".
Its other keys are "<base><name>" for each name of governor.protocol.KEYS
(its docstring says what each holds), all in the state key's hash slot
(the hash tag {<governor name>}); the library derives them once per state
key (lib/call.lua) and reaches them by name, KEY.<name> (KEY_NAMES and TYPES
are generated), never by position. Each key passed adds to an FCALL's
cost, so a call passes one, not fourteen. On a Redis
Cluster a call passes every key, in the order of KEYS: a slot that is
migrating may hold some of them and not others, and only keys the call
declares make Redis refuse it (TRYAGAIN, ASK) before it runs; a function
given the state key alone there answers GOVERNOR_KEYS before anything.

ARGV (common to every script)
  ARGV[1] now       int ms or ''  injected clock, or '' for Redis TIME
  ARGV[2] channel   string        pub/sub channel on which grants are announced
  ARGV[3..]                       the operation's own arguments (see its header)

Replies: flat arrays whose first element is the schema version, SCHEMA.
Error replies (raised with error(msg, 0), mapped by governor/errors.py):
  GOVERNOR_WRONGTYPE <key>  a key of this governor holds another Redis type
  GOVERNOR_BADARG <what>    a malformed argument (client bug or tampering)
  GOVERNOR_SCHEMA <found>   the state hash was written by another schema
  GOVERNOR_BADSTATE <what>  a stored state value is missing or out of range
  GOVERNOR_MISSING <hash>   the config or policy hash is gone while the state
                            is there: the client runs init.lua (which stores
                            its config again) and calls again
  GOVERNOR_LAYOUT <l> <min> the state's layout l admits clients of layout min
                            and up only (lib/origin.lua)
  GOVERNOR_KEYS <why>       a call passed the state key alone to a Redis
                            Cluster node: the client sends it again with
                            every key (see KEYS)

Cost. The library's tables and helpers are built once, at load; a call
pays for each redis.call, each stored field it reads and checks (a small
hash is a listpack, scanned from its start for each field: a new config or
policy hash stores the hot paths' fields first, HOT; the state, whose
origin stamp is longer than a listpack's values may be, is a hash table)
and each table it builds (docs/benchmarks/instructions.md measures the
calls), so the hot paths read only the fields a path needs, with
one HMGET per hash, decide what they read before their first write (a
report's read plan: the_policy() of lib/policy.lua tells a quiet
success, which reads the policy's streak alone, no config beyond
max_capacity and the idle time and no window count) and let reads of a
key tell its type. Every operation marks its steps ("-- step: ..."
lines at its top level), as PLANS of lib/plans.lua declares them (what
each reads and checks, which write); scripts/report_stages.py counts the
hot operations' steps under callgrind.
Every count is derived with ZCOUNT over the live range, so expired
leases, dead waiters and old window events never count even before they
are removed; removal (reclaim) runs at most once per RECLAIM_MS and
removes at most BATCH entries of each kind; all keys' expiry is pushed
back at most once per idle_ms / 8, and at once only for a key this call
may have created. Each script is O(log N) in leases, waiters and window
events, amortised.

Schema. The schema version is in every key's name (governor.protocol
SCHEMA_VERSION) and in the state's schema field, which init and the
operator scripts check (GOVERNOR_SCHEMA), and so does any script that
finds the state unreadable. Within the schema, the state's origin stamp
(the field origin, read by load() with the fields it reads anyway) holds
its layout and the oldest client layout that may use it, and the server it
was written under: lib/origin.lua checks it on every call.

No write and then a failure. Redis keeps a script's writes when it then
fails, so everything that could stop a script is checked before its first
write: every argument (arg_int, arg_id, ...), every stored value it reads
(load: GOVERNOR_BADSTATE), and the type of every key it touches: a read of
the key tells it (a command on a key of another type fails before
anything is written), else guard() or check_types() checks it. PLANS of
lib/plans.lua declares, step by step, what each operation reads and
checks and where it starts writing (tests/test_read_plans.py holds the
code to it). Each
function is registered with its flags (status: no-writes), so a Redis out
of memory refuses a writing one before it runs.
]]

-- Redis's API and Lua's standard library as upvalues of the library's
-- functions. A function reaches a global through its environment, an empty
-- table whose metatable's __index is Redis's globals: a lookup costs about
-- three times an upvalue's (scripts/lua_costs.py), and a call looks up a
-- few dozen globals. While Redis loads the library only
-- the loading API exists (the registrations at the end use it): the first
-- call binds the rest (begin).
local function runtime_globals()
  return redis, tonumber, type, pairs, ipairs, select, unpack, string, math, table
end
local redis, tonumber, type, pairs, ipairs, select, unpack, string, math, table = redis

local BATCH = 64
local RECLAIM_MS = 1000

-- Per call. The library's top level runs once, when Redis loads it; each
-- call of an operation starts with begin(keys, argv) (lib/call.lua), which binds the
-- call's KEYS and ARGV and clears what the previous call left.
local KEYS, ARGV = {}, {}  -- the governor's keys in KEY_NAMES' order, the call's ARGV
local KEY = {}          -- the governor's keys by name
local TYPE_OF = {}      -- key -> its Redis type
local OPS = {}
-- What the fragments learnt during this call, each false until learnt:
-- begin() sets them false again (one table kept across calls: a table made
-- per call costs Redis more than clearing its fields; and false, not nil:
-- a field cleared to nil leaves a key the collector may drop, and setting
-- it again then inserts it anew):
--   active  the active budget kinds, their fields read (lib/budgets.lua)
--   caps    tenant -> {cap, slot} or false, as this call found them (lib/shares.lua)
--   held    field of held -> leases in flight, as this call read and changed them (lib/shares.lua)
--   live    the leases in flight, once counted (lib/admission.lua)
--   repairs field, stored string, value read: each stored field found out of range (lib/fields.lua)
--   foreign why a read-only call found the state written by another server (lib/origin.lua)
--   ttl_noted the longest lease TTL the call announced (note_ttl of lib/origin.lua)
--   ttl_rose  the call raised ttl_max: finish() announces it
--   origin  the state's origin stamp as load() read it (false: none; lib/origin.lua)
--   tiers   the call wrote what a client before TIERS_LAYOUT misreads: finish() stamps it (lib/fields.lua)
local CALL = {}
local NOW, NOW_S, LIVE, CHANNEL
local READ_ONLY     -- the call may not write (status.lua sets it): a state that came back is only reported
local STATE, CONFIG, POLICY  -- the state, config and policy hashes as the call read them (nil: none yet)
local DIRTY         -- hash name -> field -> true: changed by the call, written back by save()
local STORE         -- field -> the exact string to store instead of the number (a config as sent)
local CREATED       -- keys the call may have created: they get their expiry at once
-- leases and holders each keep a sentinel entry (never live, never a
-- valid id), so they are not deleted when the last lease goes and keep the
-- expiry touch_all gave them: acquiring into an empty fleet sets none.
local SENTINEL = '~'

local function fail(code, detail)
  error('GOVERNOR_' .. code .. ' ' .. detail, 0)
end

-- memo(limit): a bounded memo, for a value worth remembering across calls
-- (a conversion, a check, a derivation). Returns the table (a lookup is
-- kept[key], kept[key][sub] or kept[key][sub][leaf]: nil when not
-- remembered) and remember(value, key, sub, leaf), which stores value
-- there (sub and leaf nil: kept[key]; the inner tables made on the way)
-- and returns it. Once `limit` values are kept, the next one empties the
-- table first: the same table (the callers hold it), so a memo never holds
-- more than `limit` values.
local function memo(limit)
  local kept, count = {}, 0
  local function remember(value, key, sub, leaf)
    if count >= limit then
      for k in pairs(kept) do kept[k] = nil end
      count = 0
    end
    count = count + 1
    if sub == nil then
      kept[key] = value
      return value
    end
    local inner = kept[key]
    if not inner then
      inner = {}
      kept[key] = inner
    end
    if leaf == nil then
      inner[sub] = value
      return value
    end
    local innermost = inner[sub]
    if not innermost then
      innermost = {}
      inner[sub] = innermost
    end
    innermost[leaf] = value
    return value
  end
  return kept, remember
end
