// dualrev/eigen.hpp: ad::real as an Eigen scalar (optional; needs Eigen 3.3
// or later, which is header-only, and C++17).
//
//     #include <dualrev/eigen.hpp>      // includes dualrev.hpp and <Eigen/Core>
//     using Vec = Eigen::Matrix<ad::real, Eigen::Dynamic, 1>;
//     ad::real f(const Vec &x) { return x.dot(x) + x.array().exp().sum(); }
//
// What it adds:
//   - Eigen::NumTraits<ad::real>, so that Eigen's matrices, arrays,
//     products, reductions and decompositions (LU, LDLT, LLT, ...) take
//     ad::real as their scalar;
//   - Eigen::ScalarBinaryOpTraits between ad::real and double, both ways,
//     so that a double matrix and an ad::real one mix in coefficient-wise
//     operations, .dot() and products with a scalar (a double matrix times
//     an ad::real one: cast it, A.cast<ad::real>(), which costs nothing on
//     the tape: its entries are constants);
//   - a bridge to the recorded matrices of dualrev/matrix.h
//     (ad::mat_make, ad::mat_vec, ad::mat_sqnorm taking Eigen types): a
//     matrix recorded once and multiplied with many vectors stores only
//     each vector per product, where Eigen's scalar loops store a record
//     per multiply and per add.
// Everything else Eigen calls (abs, abs2, sqrt, exp, log, tanh, pow,
// isfinite, min/max, ...) is dualrev.hpp's, found by argument-dependent
// lookup; conj, real and imag of a real scalar are Eigen's own.
// See README.md ("Eigen") and docs/api.md ("dualrev/eigen.hpp").
#ifndef DUALREV_EIGEN_HPP
#define DUALREV_EIGEN_HPP

#include "../dualrev.hpp"

#include <Eigen/Core>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace Eigen {

// As Eigen documents for a custom scalar type ("Using custom scalar
// types"): a real, signed, non-integer type.  RequireInitialization is 0:
// ad::real is trivial (C's struct), and Eigen may copy it as bytes; an
// uninitialised coefficient is garbage, as for double.  The costs are a
// record's rather than a double operation's, so that Eigen evaluates a
// nested expression once rather than coefficient by coefficient twice
// (each evaluation is a record more on the tape).  The limits are double's,
// as constants.
template <>
struct NumTraits<ad_real> : GenericNumTraits<ad_real> {
    typedef ad_real Real;
    typedef ad_real NonInteger;
    typedef ad_real Nested;
    typedef ad_real Literal;
    enum {
        IsComplex = 0,
        IsInteger = 0,
        IsSigned = 1,
        RequireInitialization = 0,
        ReadCost = 1,
        AddCost = 3,
        MulCost = 3
    };
    static inline Real epsilon() { return NumTraits<double>::epsilon(); }
    static inline Real dummy_precision() { return NumTraits<double>::dummy_precision(); }
    static inline Real highest() { return NumTraits<double>::highest(); }
    static inline Real lowest() { return NumTraits<double>::lowest(); }
    static inline Real infinity() { return NumTraits<double>::infinity(); }
    static inline Real quiet_NaN() { return NumTraits<double>::quiet_NaN(); }
    static inline int digits10() { return NumTraits<double>::digits10(); }
    static inline int digits() { return NumTraits<double>::digits(); }
};

// ad::real with double, either way round, is an ad::real: the mixed
// operators of dualrev.hpp (ad_add_rd, ad_mul_dr, ...), a constant operand
// costing no record.
template <typename BinaryOp>
struct ScalarBinaryOpTraits<ad_real, double, BinaryOp> {
    typedef ad_real ReturnType;
};
template <typename BinaryOp>
struct ScalarBinaryOpTraits<double, ad_real, BinaryOp> {
    typedef ad_real ReturnType;
};

}  // namespace Eigen

namespace ad {

// Eigen's dense types of ad::real, as Eigen names its own (MatrixXd, ...).
template <int Rows = Eigen::Dynamic, int Cols = Eigen::Dynamic>
using matrix = Eigen::Matrix<real, Rows, Cols>;
template <int Rows = Eigen::Dynamic>
using vector = Eigen::Matrix<real, Rows, 1>;

namespace detail {

template <class D>
using eigen_plain_t = remove_cvref_t<D>;

template <class D, class = void>
struct is_eigen_dense : std::false_type {};
template <class D>
struct is_eigen_dense<D, std::void_t<typename eigen_plain_t<D>::Scalar>>
    : std::is_base_of<Eigen::DenseBase<eigen_plain_t<D>>, eigen_plain_t<D>> {};

// An Eigen vector's coefficients as one array of S: the vector's own when
// they are contiguous, else a copy that lives as long as the view.
template <class S>
using contiguous_vector = Eigen::Ref<const Eigen::Matrix<S, Eigen::Dynamic, 1>>;

template <class D>
void check_vector(const char *who, const mat &M, const Eigen::MatrixBase<D> &x)
{
    if (static_cast<std::size_t>(x.size()) != M.cols || (x.rows() != 1 && x.cols() != 1))
        throw error(AD_EINVAL, std::string(who) + ": x has " + std::to_string(x.rows()) + " x " +
                                   std::to_string(x.cols()) + " entries, the matrix " +
                                   std::to_string(M.cols) + " columns");
}

}  // namespace detail

// A recorded matrix (ad_mat_record) made from an Eigen matrix of ad::real,
// or a wrapped one (ad_mat_wrap) from an Eigen matrix of double: the
// handle refers to A's coefficients, which must stay where they are and
// unchanged while the handle is used (A must outlive it: a temporary is
// refused at compile time).  A is row-major storage, as ad_mat reads it
// (Eigen::Matrix<ad::real, R, C, Eigen::RowMajor>, a vector, or a block of
// rows of one, a Map of row-major data); Eigen's default column-major
// storage is refused at compile time.  Constant zeros above (below) the
// diagonal are found as by ad_mat_record, so a triangular factor costs what
// its entries do.  Throws ad::error: AD_EINVAL if the rows are not
// contiguous (a block of columns), AD_ENOMEM, AD_ERANGE.
template <class D, std::enable_if_t<detail::is_eigen_dense<D>::value, int> = 0>
mat mat_make(D &&A)
{
    using M = detail::eigen_plain_t<D>;
    using S = std::remove_cv_t<typename M::Scalar>;
    static_assert(std::is_same_v<S, real> || std::is_same_v<S, double>,
                  "ad::mat_make: a matrix of ad::real (recorded) or of double (wrapped)");
    static_assert(!(std::is_rvalue_reference_v<D &&> &&
                    std::is_base_of_v<Eigen::PlainObjectBase<M>, M>),
                  "ad::mat_make: the handle refers to the matrix's coefficients, and a temporary "
                  "dies before the handle is used: keep the matrix in a variable");
    static_assert((static_cast<unsigned>(M::Flags) & Eigen::DirectAccessBit) != 0,
                  "ad::mat_make: an expression has no coefficients to refer to: evaluate it "
                  "into a row-major matrix kept in a variable");
    static_assert(M::IsRowMajor || M::ColsAtCompileTime == 1 || M::RowsAtCompileTime == 1,
                  "ad::mat_make: ad_mat reads row-major storage: use "
                  "Eigen::Matrix<ad::real, Rows, Cols, Eigen::RowMajor>");
    const Eigen::DenseBase<M> &a = A;
    std::size_t rows = static_cast<std::size_t>(a.rows()), cols = static_cast<std::size_t>(a.cols());
    // Row-major and contiguous: coefficient (r, c) at r * cols + c.
    bool contiguous = (cols <= 1 || a.derived().colStride() == 1) &&
                      (rows <= 1 || a.derived().rowStride() == a.cols());
    if (!contiguous)
        throw error(AD_EINVAL, "ad::mat_make: the matrix's rows are not contiguous");
    mat out{};
    ad_status s;
    if constexpr (std::is_same_v<S, real>)
        s = ad_mat_record(rows, cols, a.derived().data(), &out);
    else
        s = ad_mat_wrap(rows, cols, a.derived().data(), &out);
    if (s != AD_OK)
        throw error(s);
    return out;
}

// y = M x for an Eigen vector x of ad::real or double (ad_mat_vec): one
// record per row of y, the product's block storing x once.  Throws
// ad::error(AD_EINVAL) if x's size is not M's columns.  A handle of
// another recording fails the recording (AD_EFOREIGN) and y is NaN, as in C.
template <class D>
vector<> mat_vec(const mat &M, const Eigen::MatrixBase<D> &x)
{
    using S = std::remove_cv_t<typename D::Scalar>;
    static_assert(std::is_same_v<S, real> || std::is_same_v<S, double>,
                  "ad::mat_vec: x is a vector of ad::real or double");
    detail::check_vector("ad::mat_vec", M, x);
    detail::contiguous_vector<S> xc(x.derived());
    vector<> y(static_cast<Eigen::Index>(M.rows));
    if constexpr (std::is_same_v<S, real>)
        ad_mat_vec_rr(&M, xc.data(), y.data());
    else
        ad_mat_vec_rd(&M, xc.data(), y.data());
    return y;
}

// |M x|^2 as one record (ad_mat_sqnorm): a Mahalanobis distance, a
// least-squares residual.  Errors as mat_vec's.
template <class D>
real mat_sqnorm(const mat &M, const Eigen::MatrixBase<D> &x)
{
    using S = std::remove_cv_t<typename D::Scalar>;
    static_assert(std::is_same_v<S, real> || std::is_same_v<S, double>,
                  "ad::mat_sqnorm: x is a vector of ad::real or double");
    detail::check_vector("ad::mat_sqnorm", M, x);
    detail::contiguous_vector<S> xc(x.derived());
    real s;
    if constexpr (std::is_same_v<S, real>)
        ad_mat_sqnorm_rr(&M, xc.data(), &s);
    else
        ad_mat_sqnorm_rd(&M, xc.data(), &s);
    return s;
}

}  // namespace ad

#endif
