-- TATP UpdateSubscriberData (2%): sets a facility's data_a and the subscriber's bit_1.
-- As in ferrotx (crates/bench/src/tatp.rs), the subscriber is updated only when the
-- facility exists (62.5%). One statement, so one implicit transaction; it locks the
-- facility row, then the subscriber row.
\set s_id ((random(0, :A) | random(1, :P)) % :P) + 1
\set sf_type random(1, 4)
\set bit random(0, 1)
\set data_a random(0, 255)
WITH sf AS (
    UPDATE special_facility SET data_a = :data_a
     WHERE s_id = :s_id AND sf_type = :sf_type
    RETURNING s_id
)
UPDATE subscriber SET bit_1 = :bit WHERE s_id = (SELECT s_id FROM sf);
