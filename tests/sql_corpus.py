"""The shared SQL corpus (PUMS and Adult): each case is (table, dpmagic SQL, SQLite SQL or None when identical).

Used by ``test_sql_corpus.py`` (against SQLite) and by the backend conformance suite (``conformance.py``: exact
Cells equal to the pandas reference on every backend).  A support module, not a test module.
"""

from __future__ import annotations

# (dataset, dpmagic SQL, SQLite SQL or None when identical)
PUMS: list[tuple[str, str | None]] = [
    ("SELECT COUNT(*) FROM PUMS.PUMS", None),
    ("SELECT COUNT(*) AS n FROM PUMS", None),
    ("SELECT COUNT(age) FROM PUMS.PUMS", None),
    ("SELECT SUM(age) FROM PUMS.PUMS", None),
    ("SELECT AVG(age) FROM PUMS.PUMS", None),
    ("SELECT AVG(income) FROM PUMS.PUMS", None),
    ("SELECT SUM(income) AS s FROM PUMS.PUMS", None),
    ("SELECT sex, AVG(age * income) AS a FROM PUMS.PUMS GROUP BY sex ORDER BY sex", None),
    ("SELECT SUM(age * age) AS s FROM PUMS.PUMS WHERE age < 40", None),
    # keys not selected: the answer still lists them first (as before this change)
    (
        "SELECT COUNT(*) AS n, AVG(income) AS a FROM PUMS.PUMS GROUP BY sex",
        "SELECT sex, COUNT(*) AS n, AVG(income) AS a FROM PUMS.PUMS GROUP BY sex",
    ),
    ("SELECT sex, COUNT(*) AS n, AVG(income) AS a FROM PUMS.PUMS GROUP BY sex ORDER BY sex", None),
    ("SELECT sex, COUNT(*) AS n FROM PUMS.PUMS GROUP BY sex ORDER BY sex DESC", None),
    (
        "SELECT TOP 5 educ, COUNT(*) AS n FROM PUMS.PUMS GROUP BY educ ORDER BY educ",
        "SELECT educ, COUNT(*) AS n FROM PUMS.PUMS GROUP BY educ ORDER BY educ LIMIT 5",
    ),
    ("SELECT educ, COUNT(*) AS n FROM PUMS.PUMS GROUP BY educ HAVING COUNT(*) > 10 ORDER BY educ", None),
    ("SELECT educ, COUNT(*) AS n FROM PUMS.PUMS GROUP BY educ HAVING n > 50 ORDER BY n DESC", None),
    (
        "SELECT TOP 3 educ, COUNT(*) AS n FROM PUMS.PUMS GROUP BY educ ORDER BY n DESC",
        "SELECT educ, COUNT(*) AS n FROM PUMS.PUMS GROUP BY educ ORDER BY n DESC LIMIT 3",
    ),
    ("SELECT race, AVG(age) AS a FROM PUMS.PUMS GROUP BY race HAVING COUNT(*) > 20 ORDER BY race", None),
    ("SELECT married, SUM(income) AS s FROM PUMS.PUMS GROUP BY married ORDER BY married", None),
    ("SELECT sex, married, COUNT(*) AS n FROM PUMS.PUMS GROUP BY sex, married ORDER BY sex, married", None),
    (
        "SELECT race, sex, AVG(income) AS a FROM PUMS.PUMS GROUP BY race, sex HAVING COUNT(*) > 30 ORDER BY race, sex",
        None,
    ),
    ("SELECT age, COUNT(*) AS n FROM PUMS.PUMS GROUP BY age ORDER BY age", None),
    ("SELECT age, AVG(income) AS a FROM PUMS.PUMS GROUP BY age HAVING COUNT(*) > 15 ORDER BY age", None),
    ("SELECT age, sex, COUNT(*) AS n FROM PUMS.PUMS WHERE age < 30 GROUP BY age, sex ORDER BY age, sex", None),
    (
        "SELECT FLOOR(age / 10) * 10 AS decade, COUNT(*) AS n FROM PUMS.PUMS GROUP BY decade ORDER BY decade",
        "SELECT (age / 10) * 10 AS decade, COUNT(*) AS n FROM PUMS.PUMS GROUP BY decade ORDER BY decade",
    ),
    (
        "SELECT FLOOR(age / 10) AS d, AVG(income) AS a FROM PUMS.PUMS GROUP BY FLOOR(age / 10) ORDER BY d",
        "SELECT (age / 10) AS d, AVG(income) AS a FROM PUMS.PUMS GROUP BY (age / 10) ORDER BY d",
    ),
    ("SELECT WIDTH_BUCKET(age, 0, 100, 5) AS b, COUNT(*) AS n FROM PUMS.PUMS GROUP BY b ORDER BY b", None),
    (
        "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END AS g, COUNT(*) AS n "
        "FROM PUMS.PUMS GROUP BY g ORDER BY g",
        None,
    ),
    (
        "SELECT CASE WHEN income < 20000 THEN 1 WHEN income < 60000 THEN 2 ELSE 3 END AS bracket, COUNT(*) AS n "
        "FROM PUMS.PUMS GROUP BY bracket ORDER BY bracket",
        None,
    ),
    ("SELECT WIDTH_BUCKET(income, 0, 100000, 4) AS b, COUNT(*) AS n FROM PUMS.PUMS GROUP BY b ORDER BY b", None),
    ("SELECT FLOOR(income / 50000) AS b, COUNT(*) AS n FROM PUMS.PUMS GROUP BY b ORDER BY b", None),
    ("SELECT educ / 4 AS e, COUNT(*) AS n FROM PUMS.PUMS GROUP BY e ORDER BY e", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE sex = 1", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE age BETWEEN 20 AND 40", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE educ IN (9, 10, 11)", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE NOT married = 1", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE sex = 1 OR age > 60", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE (sex = 1 AND age > 60) OR (sex = 0 AND age < 25)", None),
    ("SELECT AVG(income) AS a FROM PUMS.PUMS WHERE married = 1 OR educ > 12", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE NOT (sex = 1 AND married = 1)", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE married = TRUE", "SELECT COUNT(*) FROM PUMS.PUMS WHERE married = 1"),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE married = FALSE", "SELECT COUNT(*) FROM PUMS.PUMS WHERE married = 0"),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE age IS NULL", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE age IS NOT NULL", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE CASE WHEN age > 50 THEN 1 ELSE 0 END = 1", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE CAST(age AS FLOAT) / 10 > 4.5", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE age % 2 = 0", None),
    ("SELECT COUNT(*) FROM PUMS.PUMS WHERE income > 50000 AND sex = 0", None),
    ("SELECT COUNT(DISTINCT educ) AS d FROM PUMS.PUMS", None),
    ("SELECT sex, COUNT(DISTINCT age) AS d FROM PUMS.PUMS GROUP BY sex ORDER BY sex", None),
    ("SELECT COUNT(DISTINCT race) AS d FROM PUMS.PUMS WHERE age > 60", None),
    ("SELECT VAR(age) AS v FROM PUMS.PUMS", None),
    ("SELECT married, VAR(age) AS v FROM PUMS.PUMS GROUP BY married ORDER BY married", None),
    ("SELECT STDDEV(age) AS s FROM PUMS.PUMS", None),
    ("SELECT sex, STDDEV(income) AS s FROM PUMS.PUMS GROUP BY sex ORDER BY sex", None),
    ("SELECT VAR_POP(age) AS v FROM PUMS.PUMS", None),
    ("SELECT VARIANCE(income) AS v FROM PUMS.PUMS WHERE age > 30", None),
    ("SELECT CAST(SUM(income) AS FLOAT) AS s FROM PUMS.PUMS", None),
    ("SELECT CAST(AVG(age) AS INT) AS a FROM PUMS.PUMS", None),
    ("SELECT (SUM(age)) AS s FROM PUMS.PUMS", None),
    ("SELECT SUM(age) / COUNT(*) AS a FROM PUMS.PUMS", "SELECT SUM(age) * 1.0 / COUNT(*) AS a FROM PUMS.PUMS"),
    ("SELECT 2 * AVG(age) AS a2 FROM PUMS.PUMS", None),
    ("SELECT sex, AVG(age) + 1 AS a, COUNT(*) * 2 AS c2 FROM PUMS.PUMS GROUP BY sex ORDER BY sex", None),
    ("SELECT sex, 1 AS one, COUNT(*) AS n FROM PUMS.PUMS GROUP BY sex ORDER BY sex", None),
    ("SELECT sex AS gender, COUNT(*) AS n FROM PUMS.PUMS GROUP BY sex ORDER BY gender", None),
    ("SELECT ROUND(AVG(income), 0) AS a FROM PUMS.PUMS", None),
    (
        "SELECT SUM(CLAMP(income, 0, 10000)) AS s FROM PUMS.PUMS",
        "SELECT SUM(MIN(MAX(income, 0), 10000)) AS s FROM PUMS.PUMS",
    ),
    (
        "SELECT SUM(LEAST(GREATEST(income, 0), 100000)) AS s FROM PUMS.PUMS",
        "SELECT SUM(MIN(MAX(income, 0), 100000)) AS s FROM PUMS.PUMS",
    ),
    (
        "SELECT sex, AVG(LEAST(income, 50000)) AS a FROM PUMS.PUMS GROUP BY sex ORDER BY sex",
        "SELECT sex, AVG(MIN(income, 50000)) AS a FROM PUMS.PUMS GROUP BY sex ORDER BY sex",
    ),
    ("SELECT MEDIAN(age) AS m FROM PUMS.PUMS", "SELECT QLO(age, 0.5), QHI(age, 0.5) FROM PUMS.PUMS"),
    (
        "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age) AS p FROM PUMS.PUMS",
        "SELECT QLO(age, 0.9), QHI(age, 0.9) FROM PUMS.PUMS",
    ),
    ("SELECT QUANTILE(age, 0.25) AS q FROM PUMS.PUMS", "SELECT QLO(age, 0.25), QHI(age, 0.25) FROM PUMS.PUMS"),
    ("SELECT sex, MIN(age) AS lo, MAX(age) AS hi FROM PUMS.PUMS GROUP BY sex ORDER BY sex", None),
    ("SELECT MAX(age) AS oldest FROM PUMS.PUMS WHERE married = 1", None),
]

ADULT: list[tuple[str, str | None]] = [
    ("SELECT COUNT(*) FROM adult", None),
    ("SELECT COUNT(*) AS n FROM adult WHERE sex = 'Female'", None),
    ("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex ORDER BY sex", None),
    ("SELECT race, COUNT(*) AS n FROM adult GROUP BY race ORDER BY n DESC", None),
    ("SELECT education, AVG(age) AS a FROM adult GROUP BY education ORDER BY education", None),
    (
        'SELECT education, AVG("hours-per-week") AS h FROM adult GROUP BY education HAVING COUNT(*) > 500 '
        "ORDER BY education",
        None,
    ),
    ('SELECT workclass, SUM("capital-gain") AS g FROM adult GROUP BY workclass ORDER BY workclass', None),
    ('SELECT "marital-status", COUNT(*) AS n FROM adult GROUP BY "marital-status" ORDER BY "marital-status"', None),
    ("SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race ORDER BY sex, race", None),
    ('SELECT class, AVG(age) AS a, AVG("education-num") AS e FROM adult GROUP BY class ORDER BY class', None),
    ("SELECT age, COUNT(*) AS n FROM adult GROUP BY age ORDER BY age", None),
    ('SELECT "education-num", COUNT(*) AS n FROM adult GROUP BY "education-num" ORDER BY "education-num"', None),
    (
        'SELECT "hours-per-week", COUNT(*) AS n FROM adult WHERE "hours-per-week" >= 35 AND "hours-per-week" <= 45 '
        'GROUP BY "hours-per-week" ORDER BY "hours-per-week"',
        None,
    ),
    (
        "SELECT FLOOR(age / 10) * 10 AS decade, COUNT(*) AS n FROM adult GROUP BY decade ORDER BY decade",
        "SELECT (age / 10) * 10 AS decade, COUNT(*) AS n FROM adult GROUP BY decade ORDER BY decade",
    ),
    (
        'SELECT FLOOR(age / 5) * 5 AS b, AVG("hours-per-week") AS h FROM adult GROUP BY b ORDER BY b',
        'SELECT (age / 5) * 5 AS b, AVG("hours-per-week") AS h FROM adult GROUP BY b ORDER BY b',
    ),
    ('SELECT WIDTH_BUCKET("hours-per-week", 0, 100, 10) AS b, COUNT(*) AS n FROM adult GROUP BY b ORDER BY b', None),
    (
        "SELECT CASE WHEN age < 25 THEN 'a' WHEN age < 45 THEN 'b' WHEN age < 65 THEN 'c' ELSE 'd' END AS g, "
        "COUNT(*) AS n FROM adult GROUP BY g ORDER BY g",
        None,
    ),
    (
        'SELECT CASE WHEN "hours-per-week" > 40 THEN 1 ELSE 0 END AS ot, sex, COUNT(*) AS n FROM adult '
        "GROUP BY ot, sex ORDER BY ot, sex",
        None,
    ),
    (
        "SELECT CASE WHEN education IN ('Bachelors', 'Masters', 'Doctorate') THEN 'degree' ELSE 'other' END AS d, "
        "COUNT(*) AS n FROM adult GROUP BY d ORDER BY d",
        None,
    ),
    ("SELECT COUNT(*) FROM adult WHERE age > 30 AND sex = 'Male'", None),
    ('SELECT COUNT(*) FROM adult WHERE age > 60 OR "hours-per-week" > 60', None),
    ("SELECT COUNT(*) FROM adult WHERE sex = 'Female' OR race = 'Black'", None),
    ("SELECT AVG(age) AS a FROM adult WHERE education = 'Doctorate' OR occupation = 'Exec-managerial'", None),
    ("SELECT COUNT(*) FROM adult WHERE NOT (sex = 'Male' AND age > 40)", None),
    ("SELECT COUNT(*) FROM adult WHERE education LIKE '%grad%'", None),
    ("SELECT COUNT(*) FROM adult WHERE occupation LIKE 'Prof%' OR occupation LIKE 'Exec%'", None),
    ("SELECT COUNT(*) FROM adult WHERE \"marital-status\" LIKE 'Married%'", None),
    ("SELECT COUNT(*) FROM adult WHERE \"native-country\" NOT IN ('United-States')", None),
    ("SELECT COUNT(*) FROM adult WHERE workclass <> '?'", None),
    ("SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 35 AND class = '>50K'", None),
    ("SELECT COUNT(*) FROM adult WHERE UPPER(sex) = 'FEMALE'", None),
    ('SELECT COUNT(*) FROM adult WHERE "capital-gain" > 0', None),
    ("SELECT COUNT(*) FROM adult WHERE CASE WHEN age < 30 THEN 'y' ELSE 'o' END = 'y'", None),
    ("SELECT COUNT(DISTINCT occupation) AS d FROM adult", None),
    ('SELECT sex, COUNT(DISTINCT "native-country") AS d FROM adult GROUP BY sex ORDER BY sex', None),
    ("SELECT COUNT(DISTINCT age) AS d FROM adult WHERE class = '>50K'", None),
    ("SELECT race, COUNT(DISTINCT education) AS d FROM adult GROUP BY race ORDER BY race", None),
    ("SELECT VAR(age) AS v FROM adult", None),
    ('SELECT STDDEV("hours-per-week") AS s FROM adult', None),
    ('SELECT sex, VAR("hours-per-week") AS v, STDDEV(age) AS s FROM adult GROUP BY sex ORDER BY sex', None),
    ("SELECT class, STDEV(age) AS s FROM adult GROUP BY class ORDER BY class", None),
    ('SELECT VAR_POP("education-num") AS v FROM adult', None),
    ("SELECT STDDEV_POP(age) AS s FROM adult WHERE sex = 'Female'", None),
    ('SELECT SUM("capital-gain") AS g FROM adult', None),
    (
        'SELECT SUM(CLAMP("capital-gain", 0, 10000)) AS g FROM adult',
        'SELECT SUM(MIN(MAX("capital-gain", 0), 10000)) AS g FROM adult',
    ),
    (
        'SELECT sex, SUM(LEAST(GREATEST("capital-gain", 0), 5000)) AS g FROM adult GROUP BY sex ORDER BY sex',
        'SELECT sex, SUM(MIN(MAX("capital-gain", 0), 5000)) AS g FROM adult GROUP BY sex ORDER BY sex',
    ),
    (
        'SELECT AVG(LEAST("capital-loss", 2000)) AS l FROM adult',
        'SELECT AVG(MIN("capital-loss", 2000)) AS l FROM adult',
    ),
    ("SELECT VAR(CLAMP(age, 20, 60)) AS v FROM adult", "SELECT VAR(MIN(MAX(age, 20), 60)) AS v FROM adult"),
    ("SELECT SUM(fnlwgt) AS w FROM adult", None),
    # row expressions inside aggregates: one release of a derived column (dpmagic.query.derived)
    ('SELECT sex, AVG(age * "hours-per-week") AS ah FROM adult GROUP BY sex ORDER BY sex', None),
    ('SELECT SUM(ABS("hours-per-week" - 40)) AS dev FROM adult WHERE age >= 25', None),
    (
        'SELECT SUM(GREATEST("capital-gain" - "capital-loss", 0)) AS g FROM adult',
        'SELECT SUM(MAX("capital-gain" - "capital-loss", 0)) AS g FROM adult',
    ),
    (
        "SELECT race, SUM(CASE WHEN sex = 'Female' THEN \"hours-per-week\" ELSE age END) AS s FROM adult "
        "GROUP BY race ORDER BY race",
        None,
    ),
    ('SELECT class, VAR(age - "education-num") AS v FROM adult GROUP BY class ORDER BY class', None),
    ('SELECT AVG(2 * "hours-per-week" - 1) AS a FROM adult', None),
    (
        "SELECT sex, SUM(fnlwgt) / COUNT(*) AS w FROM adult GROUP BY sex ORDER BY sex",
        "SELECT sex, SUM(fnlwgt) * 1.0 / COUNT(*) AS w FROM adult GROUP BY sex ORDER BY sex",
    ),
    ("SELECT race, COUNT(*) * 100.0 / 32561 AS pct FROM adult GROUP BY race ORDER BY race", None),
    ("SELECT CAST(COUNT(*) AS FLOAT) AS n FROM adult", None),
    ("SELECT sex, CAST(AVG(age) AS INT) AS a FROM adult GROUP BY sex ORDER BY sex", None),
    ("SELECT (COUNT(*)) AS n FROM adult WHERE age < 20", None),
    (
        "SELECT TOP 4 occupation, COUNT(*) AS n FROM adult GROUP BY occupation ORDER BY n DESC",
        "SELECT occupation, COUNT(*) AS n FROM adult GROUP BY occupation ORDER BY n DESC LIMIT 4",
    ),
    ("SELECT occupation, COUNT(*) AS n FROM adult GROUP BY occupation ORDER BY n DESC LIMIT 3", None),
    (
        'SELECT "native-country", COUNT(*) AS n FROM adult GROUP BY "native-country" HAVING COUNT(*) > 100 '
        "ORDER BY n DESC",
        None,
    ),
    ("SELECT education, AVG(age) AS a FROM adult GROUP BY education HAVING AVG(age) > 40 ORDER BY a DESC", None),
    ("SELECT workclass, COUNT(*) AS n FROM adult GROUP BY workclass ORDER BY 2 DESC", None),
    ("SELECT sex, class, COUNT(*) AS n FROM adult GROUP BY 1, 2 ORDER BY 1, 2", None),
    ("SELECT MEDIAN(age) AS m FROM adult", "SELECT QLO(age, 0.5), QHI(age, 0.5) FROM adult"),
    (
        'SELECT PERCENTILE_CONT(0.75) WITHIN GROUP (ORDER BY "hours-per-week") AS p FROM adult',
        'SELECT QLO("hours-per-week", 0.75), QHI("hours-per-week", 0.75) FROM adult',
    ),
    ('SELECT race, MIN(age) AS youngest, MAX("hours-per-week") AS h FROM adult GROUP BY race ORDER BY race', None),
]

CASES = [("pums", q, lite) for q, lite in PUMS] + [("adult", q, lite) for q, lite in ADULT]
