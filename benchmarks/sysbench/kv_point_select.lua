#!/usr/bin/env sysbench
-- Point reads by primary key, one row per event, for
-- benchmarks/sql_experiments.sh: MariaDB used as a key-value store.
--
-- Each sysbench thread opens one connection and prepares, for every table in
-- --tables, "SELECT <--columns> FROM <table> WHERE id = ?" (a server-side
-- prepared statement, binary protocol). Each event picks a table uniformly
-- and an id, executes the statement once and checks that exactly one row
-- came back; missing rows are counted and printed by each thread at the end
-- ("kv_point_select: thread N: M misses"), so a wrong load cannot pass as a
-- fast run.
--
-- Ids come from one of two places:
--   --id-file=PATH  thread T reads PATH.T (one id a line, written by
--                   benchmarks/sql_data.py gen-b) in order, wrapping; the
--                   caller bounds the run with --events.
--   --rows=N        ids drawn uniformly from 1..N (sysbench's generator);
--                   the caller bounds the run with --time.
--
-- Loading an id file happens in thread_init, before sysbench starts its
-- clock, so it is not counted in the run's time.

sysbench.cmdline.options = {
   tables = {"Comma-separated tables to read; one is chosen uniformly per event", "kv"},
   columns = {"Column list of the SELECT", "*"},
   rows = {"Ids are drawn uniformly from 1..rows when no --id-file is given", 0},
   id_file = {"Thread T reads ids from <id-file>.<T> in order, wrapping", ""},
}

local function split_commas(text)
   local parts = {}
   for part in string.gmatch(text, "[^,]+") do
      parts[#parts + 1] = part
   end
   return parts
end

local function load_ids(path)
   local file, err = io.open(path, "r")
   if file == nil then
      error("kv_point_select: cannot open id file " .. path .. ": " .. tostring(err))
   end
   local ids = {}
   for line in file:lines() do
      local id = tonumber(line)
      if id ~= nil then
         ids[#ids + 1] = id
      end
   end
   file:close()
   if #ids == 0 then
      error("kv_point_select: no ids in " .. path)
   end
   return ids
end

function thread_init()
   tables = split_commas(sysbench.opt.tables)
   if #tables == 0 then
      error("kv_point_select: --tables is empty")
   end
   drv = sysbench.sql.driver()
   con = drv:connect()
   stmts = {}
   params = {}
   for t = 1, #tables do
      stmts[t] = con:prepare(string.format("SELECT %s FROM %s WHERE id = ?",
                                           sysbench.opt.columns, tables[t]))
      params[t] = stmts[t]:bind_create(sysbench.sql.type.BIGINT)
      stmts[t]:bind_param(params[t])
   end
   if sysbench.opt.id_file ~= "" then
      ids = load_ids(string.format("%s.%d", sysbench.opt.id_file, sysbench.tid))
      next_id = 1
   elseif sysbench.opt.rows < 1 then
      error("kv_point_select: give --id-file or --rows")
   end
   misses = 0
end

function event()
   local t = 1
   if #tables > 1 then
      t = sysbench.rand.uniform(1, #tables)
   end
   local id
   if ids ~= nil then
      id = ids[next_id]
      next_id = next_id + 1
      if next_id > #ids then
         next_id = 1
      end
   else
      id = sysbench.rand.uniform(1, sysbench.opt.rows)
   end
   params[t]:set(id)
   local rs = stmts[t]:execute()
   if rs == nil or tonumber(rs.nrows) ~= 1 then
      misses = misses + 1
   end
end

function thread_done()
   if misses > 0 then
      io.stderr:write(string.format("kv_point_select: thread %d: %d misses\n",
                                    sysbench.tid, misses))
   end
   for t = 1, #stmts do
      stmts[t]:close()
   end
   con:disconnect()
end
