-- TATP GetAccessData (35%): one access_info row (read-only, one statement; 62.5% found).
\set s_id ((random(0, :A) | random(1, :P)) % :P) + 1
\set ai_type random(1, 4)
SELECT data1, data2, data3, data4
  FROM access_info WHERE s_id = :s_id AND ai_type = :ai_type;
