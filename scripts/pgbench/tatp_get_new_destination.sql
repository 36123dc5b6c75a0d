-- TATP GetNewDestination (10%): an active facility's call forwardings that cover a time
-- (read-only, one statement; succeeds about 22% of the time under the population rules).
\set s_id ((random(0, :A) | random(1, :P)) % :P) + 1
\set sf_type random(1, 4)
\set start_time random(0, 2) * 8
\set end_time random(0, 23)
SELECT cf.numberx
  FROM special_facility sf
  JOIN call_forwarding cf ON cf.s_id = sf.s_id AND cf.sf_type = sf.sf_type
 WHERE sf.s_id = :s_id AND sf.sf_type = :sf_type AND sf.is_active = 1
   AND cf.start_time <= :start_time AND cf.end_time > :end_time;
