// A C++ program using an installed dualrev through dualrev.hpp: the
// gradient of x0 exp(-(x0 + x1)) against its closed form, written once as a
// template and evaluated on double too.
#include <dualrev.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

template <class T>
T f(const T *x, std::size_t)
{
    using std::exp;
    return x[0] * exp(-(x[0] + x[1]));
}

int main()
{
    std::vector<double> x = {1.0, 2.0};
    auto r = ad::gradient([](const ad::real *v, std::size_t n) { return f(v, n); }, x);
    double e = std::exp(-3.0);
    bool ok = std::fabs(r.value - e) <= 1e-15 && std::fabs(r.grad[0]) <= 1e-15 &&
              std::fabs(r.grad[1] + e) <= 1e-15 && r.value == f(x.data(), 2);
    std::printf("%s: f = %.17g, grad = (%.17g, %.17g)\n", ok ? "ok" : "FAIL", r.value, r.grad[0],
                r.grad[1]);
    return ok ? 0 : 1;
}
