-- SmallBank DepositChecking (15%): adds :v to checking (one statement).
\set hot random(1, 100)
\if :hot <= :hot_percent
\set a1 random(0, :hot_accounts - 1)
\else
\set a1 random(0, :accounts - 1)
\endif
\set v random(1, 10)
UPDATE checking SET bal = bal + :v WHERE custid = :a1;
