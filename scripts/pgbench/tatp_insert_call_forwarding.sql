-- TATP InsertCallForwarding (2%): finds the subscriber by number, checks that the facility
-- exists, and inserts a call forwarding unless one with the same key exists (31.25%
-- succeed). ON CONFLICT DO NOTHING keeps a duplicate key from aborting the client.
\set s_id ((random(0, :A) | random(1, :P)) % :P) + 1
\set sf_type random(1, 4)
\set start_time random(0, 2) * 8
\set end_time random(0, 23)
\set numberx random(0, 999999999999999)
INSERT INTO call_forwarding (s_id, sf_type, start_time, end_time, numberx)
SELECT sf.s_id, sf.sf_type, CAST(:start_time AS smallint), CAST(:end_time AS smallint),
       lpad(CAST(:numberx AS text), 15, '0')
  FROM subscriber s
  JOIN special_facility sf ON sf.s_id = s.s_id
 WHERE s.sub_nbr = lpad(CAST(:s_id AS text), 15, '0') AND sf.sf_type = :sf_type
ON CONFLICT DO NOTHING;
