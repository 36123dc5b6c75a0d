-- TATP UpdateLocation (14%): sets vlr_location, finding the subscriber by its number
-- (sub_nbr: the id as 15 zero-padded digits, indexed). One statement.
\set s_id ((random(0, :A) | random(1, :P)) % :P) + 1
\set location random(0, 2147483647)
UPDATE subscriber SET vlr_location = :location
 WHERE sub_nbr = lpad(CAST(:s_id AS text), 15, '0');
