-- Orders and the customers who place them.
CREATE TABLE customers (
    id BIGINT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE
);

CREATE TABLE public.orders (
    id BIGINT PRIMARY KEY,
    customer_id BIGINT REFERENCES customers (id),
    total NUMERIC(12, 2) NOT NULL
);

CREATE INDEX orders_by_customer ON public.orders (customer_id);

CREATE VIEW big_orders AS
SELECT id, customer_id, total
FROM public.orders
WHERE total > 1000;

INSERT INTO customers (id, email) VALUES (1, 'ada@example.com');

CREATE FUNCTION order_count(cid BIGINT) RETURNS BIGINT AS $$
    SELECT count(*) FROM public.orders WHERE customer_id = cid;
$$ LANGUAGE sql;

ALTER TABLE public.orders ADD COLUMN placed_at TIMESTAMP;
