import Foundation

protocol Shape {
    func area() -> Double
}

/// A circle of a given radius.
struct Circle: Shape {
    let radius: Double

    func area() -> Double {
        return Double.pi * radius * radius
    }
}

class Canvas {
    private var shapes: [Shape] = []

    init() {}

    func add(_ shape: Shape) {
        shapes.append(shape)
    }
}

extension Canvas {
    func totalArea() -> Double {
        shapes.reduce(0) { $0 + $1.area() }
    }
}

enum Unit { case meters, feet }

func describe(_ shape: Shape) -> String {
    "area \(shape.area())"
}
