-- Gantry's job_submit.lua (Slurm's job_submit/lua plugin): every new job of a Gantry-managed
-- partition is held, so that Gantry, not Slurm, decides where and when it starts. Gantry then
-- pins the job's nodes (scontrol update JobId=.. ReqNodeList=.. NumNodes=..) and releases it.
-- Users change nothing: they submit with plain sbatch -p <partition>.
--
-- Install: copy next to slurm.conf (Slurm looks for job_submit.lua in slurm.conf's directory)
-- and set JobSubmitPlugins=lua. The managed partitions are the comma-separated list in the
-- environment variable GANTRY_MANAGED_PARTITIONS of slurmctld, or `default_partitions` below.
-- Remove the plugin (or the partition from the list) to give the jobs back to Slurm's own
-- scheduler. See docs/slurm.md.
--
-- Fail-open: with GANTRY_HEARTBEAT_FILE set (in slurmctld's environment, or
-- `default_heartbeat_file` below), new jobs are no longer held once gantryd's heartbeat in that
-- file ("TIME AFTER": the Unix time of its last cycle, and the silence in seconds it allows; 0
-- turns fail-open off) is more than AFTER seconds old: Slurm then schedules them itself. No
-- file means fail-open is off. `gantry failopen` releases the jobs already held.

local default_partitions = "gantry"
local managed = os.getenv("GANTRY_MANAGED_PARTITIONS") or default_partitions
local default_heartbeat_file = nil
local heartbeat_file = os.getenv("GANTRY_HEARTBEAT_FILE") or default_heartbeat_file

-- Seconds gantryd has been silent beyond its limit, or nil while it is alive (or fail-open is
-- off). Read at every submission: a small local file, so slurmctld does not wait on it.
local function gantry_silent_for()
   if heartbeat_file == nil or heartbeat_file == "" then return nil end
   local f = io.open(heartbeat_file, "r")
   if f == nil then return nil end
   local beat, after = f:read("*n", "*n")
   f:close()
   if beat == nil or after == nil or after <= 0 then return nil end
   local silent = os.time() - beat
   if silent > after then return silent end
   return nil
end

-- A job's data, declared in its batch script the way #SBATCH options are, before the first
-- command:
--   #GANTRY --dataset=s3://bucket/imagenet-mds     (repeatable: every dataset the job reads)
--   #GANTRY --checkpoint=s3://bucket/ckpt/run-42   (where its checkpoints live)
-- They go into the job's AdminComment as one line Gantry reads back from squeue --json:
--   gantry-data dataset=URL dataset=URL checkpoint=URL
-- (users cannot set an AdminComment themselves, so nobody but this script writes it). Returns
-- that line (nil when the script declares nothing), or nil and a message for the user.
local data_schemes = { file = true, s3 = true, http = true, https = true }
local max_declarations = 16
local max_url_length = 1024

local function data_declarations(script)
   if script == nil then return nil end
   local words = {}
   local first = true
   for line in string.gmatch(script, "([^\n]*)\n?") do
      if first and string.sub(line, 1, 2) == "#!" then
         -- the interpreter line
      elseif string.match(line, "^%s*$") then
         -- blank lines do not end the directives
      elseif string.sub(line, 1, 1) ~= "#" then
         break  -- the first command: directives after it are ignored, as sbatch does
      else
         local key, url = string.match(line, "^#GANTRY%s+%-%-(%a+)[=%s]%s*(%S+)%s*$")
         if key == nil and string.match(line, "^#GANTRY") then
            return nil, "cannot read '" .. line .. "': use #GANTRY --dataset=URL or --checkpoint=URL"
         end
         if key ~= nil then
            if key ~= "dataset" and key ~= "checkpoint" then
               return nil, "unknown directive #GANTRY --" .. key .. " (--dataset or --checkpoint)"
            end
            local scheme = string.match(url, "^(%a[%w+.-]*)://")
            if scheme == nil or not data_schemes[string.lower(scheme)] then
               return nil, "#GANTRY --" .. key .. " " .. url ..
                  ": not a file://, s3://, http:// or https:// URL"
            end
            if #url > max_url_length then
               return nil, "#GANTRY --" .. key .. ": URL longer than " .. max_url_length
            end
            table.insert(words, key .. "=" .. url)
            if #words > max_declarations then
               return nil, "more than " .. max_declarations .. " #GANTRY data directives"
            end
         end
      end
      first = false
   end
   if #words == 0 then return nil end
   return "gantry-data " .. table.concat(words, " ")
end

-- True when the comma-separated partition list `parts` names a managed partition.
local function is_managed(parts)
   if parts == nil then return false end
   for p in string.gmatch(parts, "[^,]+") do
      if string.find("," .. managed .. ",", "," .. p .. ",", 1, true) then return true end
   end
   return false
end

-- The partition a job without -p lands in: the default one among those the user may use.
local function default_partition(part_list)
   for _, part in pairs(part_list) do
      if part.flag_default == 1 then return part.name end
   end
   return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local parts = job_desc.partition or default_partition(part_list)
   if is_managed(parts) then
      local data, problem = data_declarations(job_desc.script)
      if problem ~= nil then
         slurm.log_user("gantry: %s", problem)
         return slurm.ERROR
      end
      if data ~= nil then job_desc.admin_comment = data end
      local silent = gantry_silent_for()
      if silent ~= nil then
         slurm.log_info("gantry: fail-open, gantryd silent for %d s: job %s of uid %u left to Slurm",
                        silent, tostring(job_desc.name), submit_uid)
         return slurm.SUCCESS
      end
      -- Priority 0 is a hold (Slurm 22.05 shows it as JobHeldUser; see slurm_job_modify).
      job_desc.priority = 0
      slurm.log_info("gantry: holding new job %s of uid %u for Gantry",
                     tostring(job_desc.name), submit_uid)
   end
   return slurm.SUCCESS
end

-- A hold set here counts as the user's own, so its owner could release it and bypass Gantry.
-- Only root (Gantry runs as root or SlurmUser) may change a job of a managed partition; users
-- may still cancel their jobs (scancel is not a modify).
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if is_managed(job_rec.partition) and modify_uid ~= 0 then
      slurm.log_user("jobs in Gantry-managed partitions are started by Gantry")
      return slurm.ESLURM_ACCESS_DENIED
   end
   return slurm.SUCCESS
end

slurm.log_info("gantry job_submit.lua loaded; managed partitions: %s; heartbeat: %s", managed,
               tostring(heartbeat_file))
return slurm.SUCCESS
