-- SmallBank WriteCheck (15%): takes :v from checking, or :v + 1 (a penalty) when savings
-- and checking together do not cover it. Locks savings (shared), then checking.
\set hot random(1, 100)
\if :hot <= :hot_percent
\set a1 random(0, :hot_accounts - 1)
\else
\set a1 random(0, :accounts - 1)
\endif
\set v random(1, 10)
\startpipeline
BEGIN;
SELECT custid FROM savings WHERE custid = :a1 FOR SHARE;
UPDATE checking
   SET bal = bal - CASE WHEN bal + (SELECT bal FROM savings WHERE custid = :a1) < :v
                        THEN :v + 1 ELSE :v END
 WHERE custid = :a1;
COMMIT;
\endpipeline
