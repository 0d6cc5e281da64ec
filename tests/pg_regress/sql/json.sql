-- Handing IDs to JavaScript: above 2^53 a JSON number loses its low bits, text does not.
CREATE TABLE items (id bigint PRIMARY KEY, name text);
INSERT INTO items VALUES (175928847299117063, 'tea');

SELECT id > 2^53 AS beyond_javascript_integers, id::float8::bigint AS as_a_javascript_number FROM items;
SELECT json_build_object('id', id::text, 'name', name) FROM items;
SELECT to_jsonb(i) || jsonb_build_object('id', i.id::text) AS row_for_javascript FROM items i;
SELECT (json_build_object('id', id::text) ->> 'id')::bigint = id AS round_trip FROM items;
