-- SmallBank Amalgamate (15%): moves all of a1's savings and checking into a2's checking.
-- Locks a1's savings, then both checking rows in id order; the last statement reads the
-- balances it zeroes from its own snapshot (taken after the locks, so they are current).
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
\startpipeline
BEGIN;
SELECT custid FROM savings WHERE custid = :a1 FOR UPDATE;
SELECT custid FROM checking WHERE custid IN (:a1, :a2) ORDER BY custid FOR UPDATE;
WITH s AS (SELECT bal FROM savings WHERE custid = :a1),
     c AS (SELECT bal FROM checking WHERE custid = :a1),
     zero_s AS (UPDATE savings SET bal = 0 WHERE custid = :a1),
     zero_c AS (UPDATE checking SET bal = 0 WHERE custid = :a1)
UPDATE checking SET bal = bal + (SELECT bal FROM s) + (SELECT bal FROM c)
 WHERE custid = :a2;
COMMIT;
\endpipeline
