-- TATP DeleteCallForwarding (2%): finds the subscriber by number and deletes one call
-- forwarding (31.25% find it). One statement.
\set s_id ((random(0, :A) | random(1, :P)) % :P) + 1
\set sf_type random(1, 4)
\set start_time random(0, 2) * 8
DELETE FROM call_forwarding
 WHERE s_id = (SELECT s_id FROM subscriber WHERE sub_nbr = lpad(CAST(:s_id AS text), 15, '0'))
   AND sf_type = :sf_type AND start_time = :start_time;
