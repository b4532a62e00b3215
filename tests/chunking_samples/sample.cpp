#include <string>
#include <vector>

namespace geo {

class Polygon {
 public:
  explicit Polygon(std::vector<double> xs) : xs_(xs) {}

  double perimeter() const {
    double total = 0;
    for (double x : xs_) total += x;
    return total;
  }

 private:
  std::vector<double> xs_;
};

double area(const Polygon& p) {
  return p.perimeter() / 4.0;
}

}  // namespace geo
