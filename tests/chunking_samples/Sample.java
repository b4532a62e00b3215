package com.example.store;

import java.util.ArrayList;
import java.util.List;

/** An in-memory repository of orders. */
public class OrderRepository {
    private final List<String> orders = new ArrayList<>();

    public OrderRepository() {
    }

    public void save(String order) {
        orders.add(order);
    }

    public int count() {
        return orders.size();
    }
}
