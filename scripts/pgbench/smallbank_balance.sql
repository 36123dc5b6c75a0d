-- SmallBank Balance (15%): reads an account's savings and checking (read-only, one
-- statement, so one snapshot).
\set hot random(1, 100)
\if :hot <= :hot_percent
\set a1 random(0, :hot_accounts - 1)
\else
\set a1 random(0, :accounts - 1)
\endif
SELECT s.bal, c.bal
  FROM savings s, checking c
 WHERE s.custid = :a1 AND c.custid = :a1;
