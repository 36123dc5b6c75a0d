-- SmallBank TransactSaving (15%): adds :v (-10 .. 10) to savings unless that takes it
-- below zero (one statement; READ COMMITTED re-checks the condition on the newest row
-- version after waiting for a lock).
\set hot random(1, 100)
\if :hot <= :hot_percent
\set a1 random(0, :hot_accounts - 1)
\else
\set a1 random(0, :accounts - 1)
\endif
\set v random(-10, 10)
UPDATE savings SET bal = bal + :v WHERE custid = :a1 AND bal + :v >= 0;
