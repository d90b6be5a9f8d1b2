// Compiled, never run: dualrev.hpp under the strictest warnings, as errors,
// as C++17 and C++20 (tests/meson.build), with every operator, function and
// driver used the way users use them, so that the templates are checked as
// instantiated and not only as declared.
#include <dualrev.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <vector>

namespace hygiene {

// One source for double and ad::real.
template <class T>
T objective(const T *x, std::size_t n)
{
    using std::abs, std::acos, std::acosh, std::asin, std::asinh, std::atan, std::atan2,
        std::atanh, std::cbrt, std::cos, std::cosh, std::erf, std::erfc, std::exp, std::expm1,
        std::fabs, std::fmax, std::fmin, std::hypot, std::lgamma, std::log, std::log10,
        std::log1p, std::log2, std::pow, std::sin, std::sinh, std::sqrt, std::tan, std::tanh,
        std::tgamma;
    T a = x[0], b = n > 1 ? x[1] : x[0];
    float f = 0.5f;
    int k = 3;
    T s = a + b + (a + 1.0) + (2 - b) + a * f * (b / k) + 1.0 / a - a;
    s += pow(a, b) + pow(a, 2) + pow(2.0, b) + atan2(a, b) + atan2(1, b) + hypot(a, 1.0);
    s -= fmin(a, b) + fmax(0, b) + fmin(a, 2.5f);
    s *= 2;
    s /= 3.0;
    s = +s + sqrt(a) + cbrt(a) + exp(a) + expm1(a) + log(a) + log1p(a) + log2(a) + log10(a);
    s = s + sin(a) + cos(a) + tan(a) + asin(a) + acos(a) + atan(a);
    s = s + sinh(a) + cosh(a) + tanh(a) + asinh(a) + acosh(a) + atanh(a);
    s = s + fabs(a) + abs(b) + erf(a) + erfc(a) + lgamma(a) + tgamma(a);
    if (a < b || a <= 1 || 2.0 > b || a >= b || a == b || 0 != a)
        s = s * ad::value(a);
    T terms[3] = {s, a, ad::constant<T>(0.25)};
    std::array<T, 2> pair = {a, b};
    std::vector<T> v(x, x + n);
    return ad::sum(3, terms) + ad::sum(pair) + ad::sqnorm(v) + ad::prod(pair) +
           ad::logsumexp(pair) + ad::dot(pair, pair) + ad::dot(n, x, x) + T{};
}

template double objective<double>(const double *, std::size_t);
template ad::real objective<ad::real>(const ad::real *, std::size_t);

void function(const ad::real *x, std::size_t n, ad::real *y, std::size_t m)
{
    for (std::size_t j = 0; j < m; j++)
        y[j] = x[j % n] * static_cast<double>(j);
}

double use_drivers(std::ostream &os)
{
    std::vector<double> x = {1.0, 2.0}, g(2), h(4), y(2), jac(4);
    std::array<double, 2> v = {1.0, 0.0};
    auto f = [](const ad::real *p, std::size_t n) { return objective(p, n); };
    auto fv = [](const std::vector<ad::real> &p) { return p[0] * p[1]; };
    auto r = ad::gradient(f, x);
    double s = r.value + ad::gradient(fv, std::vector<double>{1.0, 2.0}).grad[0] + ad::gradient(f, x, g);
    s += ad::hvp(f, x, v).hv[0] + ad::hvp(f, x, v, g, y);
    s += ad::hessian(f, x).hess[3] + ad::hessian(f, x, g, h);
    s += ad::jacobian(function, x, 2)(1, 1);
    ad::jacobian(function, x, y, jac);
    s += ad::jvp(function, x, v, 2).jv[0] + ad::vjp(function, x, v).wj[1];
    auto vf = [](const std::vector<ad::real> &p) { return std::vector<ad::real>{p[0] * p[1]}; };
    s += ad::jacobian(vf, x, 1).jac[0];
    ad::sparse_jacobian_result sj = ad::sparse_jacobian(function, x, 2);
    s += static_cast<double>(sj.jac.nnz());
    ad::linear L = ad::linearize(function, x, 2);
    s += L.jvp(v)[0] + L.vjp(v)[1];
    s += static_cast<double>(ad::tape_stats().records + ad::set_tape_limit(0));
    try {
        ad::release();
    } catch (const ad::error &e) {
        os << e.what() << static_cast<int>(e.status());
    }
    os << ad::constant(1.5) << ad::version();
    return s;
}

// The ad::real forms of gradient and jvp (nested derivatives), beside the
// double ones they must not be ambiguous with.
double use_nested()
{
    std::vector<double> x = {1.0, 2.0};
    auto f = [](const ad::real *p, std::size_t n) { return p[0] * p[n - 1]; };
    auto fv = [](const std::vector<ad::real> &p) { return p[0] * p[1]; };
    auto vf = [](const std::vector<ad::real> &p) { return std::array<ad::real, 1>{p[0] * p[1]}; };
    auto outer = [&](const ad::real *p, std::size_t n) {
        std::vector<ad::real> v(p, p + n), g(n), y(2), jv(2);
        ad::real s = ad::gradient(f, v).value + ad::gradient(fv, v).grad[1];
        s += ad::gradient(f, ad::real_array_view(p, n), g) + g[0];
        std::array<ad::real, 2> a = {p[0], p[1]};
        s += ad::gradient(fv, a).grad[0];
        ad::jvp(function, v, v, y, jv);
        s += jv[1] + ad::jvp(vf, a, v, 1).jv[0] + ad::jvp(function, v, a, 2).value[1];
        ad::real_array_ref r(jv);
        ad::real_array_view w(r);
        return s + w[0] + *r.begin();
    };
    auto e = ad::gradient(f, {});
    return ad::gradient(outer, x).grad[0] + static_cast<double>(e.grad.size());
}

double use_program()
{
    std::vector<double> x = {1.0, 2.0}, g(2);
    auto f = [](const ad::real *p, std::size_t) { return p[0] < p[1] ? p[0] * p[1] : p[0]; };
    ad::program P = ad::record_program(f, x);
    auto vf = [](const ad::real *p, std::size_t, ad::real *y, std::size_t) { y[0] = p[0] + 1.0; };
    ad::program Q = ad::record_program_function(vf, x, 1);
    return P.gradient(x, g) + P.value(x) + Q.jacobian(x).jac[0] +
           static_cast<double>(Q.inputs() + Q.outputs());
}

}  // namespace hygiene
