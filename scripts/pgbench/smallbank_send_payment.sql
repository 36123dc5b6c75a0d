-- SmallBank SendPayment (25%): moves :v from a1's checking to a2's if a1 has it.
-- Variables from postgres_compare.py: accounts, hot_accounts, hot_percent; account ids
-- are 0 .. accounts - 1 and the hot set is 0 .. hot_accounts - 1, as in ferrotx.
-- Locks: both checking rows in id order (every SmallBank script takes its locks in the
-- order savings before checking, lower id first, so no two transactions deadlock).
-- The statements go in one pipeline: one round trip per transaction.
\set hot random(1, 100)
\if :hot <= :hot_percent
\set a1 random(0, :hot_accounts - 1)
\else
\set a1 random(0, :accounts - 1)
\endif
\set hot random(1, 100)
\if :hot <= :hot_percent
\set a2 random(0, :hot_accounts - 1)
\else
\set a2 random(0, :accounts - 1)
\endif
\if :a2 = :a1
\set a2 (:a1 + 1) % :accounts
\endif
\set v random(1, 10)
\startpipeline
BEGIN;
SELECT custid FROM checking WHERE custid IN (:a1, :a2) ORDER BY custid FOR UPDATE;
UPDATE checking SET bal = bal + CASE WHEN custid = :a1 THEN -1 ELSE 1 END * :v
 WHERE custid IN (:a1, :a2)
   AND (SELECT bal FROM checking WHERE custid = :a1) >= :v;
COMMIT;
\endpipeline
