-- COPY through psql: options, CSV and text parsing, errors with their CONTEXT,
-- COPY TO in every format option. crates/walrus/tests/drivers.rs runs it on
-- PostgreSQL 15 and on walrus and compares the outputs (LOCATION lines aside).
create table t (a int not null, b text, c varchar(3));
copy t from stdin;
1	x	y
2	z
\.
copy t from stdin;
1	x	y	4
\.
copy t from stdin;
1	x	y
q	z	w
\.
copy t from stdin;
1	x	yyyy
\.
copy t from stdin;
\N	x	y
\.
copy t from stdin csv;
1,x,"y
2",
\.
copy t from stdin csv;
1,"",
2,,
3,"a,""b",abc
\.
copy t from stdin (format csv, header match);
a,b,c
4,"q
r",z
\.
copy t from stdin (format csv, header match);
a,c,b
\.
copy t from stdin (format csv, header match);
a,b
\.
copy t (a, c) from stdin with csv header delimiter ';' force not null c;
x;y
5;
\.
copy t from stdin (format csv, force_null (b));
6,"",
7,"x",
\.
copy t from stdin;
8	a\tb\\c\nd	\101
9	\N	
\.
select a, b is null as bnull, c is null as cnull, b, c from t order by a;
copy t to stdout;
copy t to stdout (format csv, header);
copy t (c, a) to stdout (format csv, force_quote *, null 'NUL');
copy (select a, b from t where a > 5 order by a) to stdout with csv header quote '''' force quote b;
copy t to stdout (format text, delimiter '|', null '', header);
copy (select 1 as "x,y", '\.' as z) to stdout csv header;
copy (select '\.' as z) to stdout csv header;
copy t to stdout (format csv, force_quote (zz));
copy t (a) to stdout (format csv, force_quote (b));
copy t (zz) to stdout;
copy nosuch to stdout;
copy t (a, a) from stdin;
copy t from stdin (format csv, force_not_null (zz));
copy t (a) from stdin (format csv, force_not_null (b));
create table u (a int primary key, b text);
copy u from stdin;
1	x
1	y
\.
copy u from stdin;
1	x
\.
copy u from stdin;
3	x\.
\.
copy u from stdin;
5	a\.b
\.
copy u from stdin csv;
4,x
\.
copy u from stdin csv;
\.
copy u from stdin csv;
10,"\."
11,\.x
\.
copy u from stdin;

\.
copy u from stdin csv;

\.
copy u from stdin (format csv, quote '''', escape '\');
12,'it\'s \\ ok'
13,'a\b'
\.
copy u from stdin (format csv);
14,"unterminated
\.
select * from u order by a;
copy u to stdout (format binary, header);
copy u from stdin (format text, header);
a	b
20	h
\.
copy u from stdin (format text, header match);
a	\N
\.
begin;
copy u from stdin;
30	in block
\.
copy u from stdin;
30	dup
\.
select 1;
rollback;
select count(*) from u;
begin read only;
copy u from stdin;
\.
rollback;
copy u to stdout where a > 1;
copy u to stdout (format csv, quote '"', escape '|');
copy (values (1, 'v')) to stdout;
copy (select 1; select 2) to stdout;
