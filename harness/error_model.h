#pragma once
// The error model: per output element, the rounding error a correct implementation
// under a numerics contract is expected to make (docs/semantics.md, "Tolerance": the floor must
// model where rounding really happens). The tolerance rule (harness/tolerance.h) uses it
// to distribute the baselines' measured error over elements, rows, tiles and heads.
//
// An oracle supplies, per output, three magnitudes per element (unit-free, from the
// float64 problem), and the harness multiplies them by the contract's rounding units:
//
//   sigma^2 = (u_op^2 * operand^2 + u_st^2 * (ref^2 + stored^2)) / 3
//           + u_acc^2 * (L / 3) * (ref^2 / 3 + operand^2 / 2)
//           + u_sc^2 * score^2                                 (u_sc^2 = u_acc^2 + u_in^2)
//
//   operand  root-sum-square of the products of the output's last reduction (P*V for O,
//            P^T*dO for dV, dS*K for dQ, dS^T*Q for dK): rounding P or dS (and the operands)
//            to the contract's type gives each product a relative error of u_op, and
//            independent errors add as a root-sum-square;
//   ref      the output itself: its own storage rounding;
//   stored   a GQA group's per-head partials of dK and dV (kernels that store each head's
//            part before summing);
//   L        the reduction length: a sum of L terms accumulated at u_acc has an error of
//            u_acc * sqrt(sum of squared partial sums), about sqrt(L/3) * sqrt(ref^2/3 +
//            operand^2/2) (a drift for same-signed terms, a random walk otherwise);
//   score    the terms weighted by each score's sensitivity: S is accumulated at u_acc
//            over Dqk products and exp(S - LSE) loses u_acc * (|S| + |LSE|), which moves
//            P by that relative amount (large logits); tf32 also rounds Q and K (u_in).
//           + (u_op^2 * via_op^2 + u_st^2 * via_st^2) / 3 + u_acc^2 * via_acc^2 + u_sc^2 * via_sc^2
//
//           + underflow^2 + fp16_operands * subnormal^2 / 3
//
//   underflow  dK and dV only: the terms of the reduction whose P is below fp32's smallest
//            normal number (2^-126), summed as magnitudes. Kernels compute P = exp(S - LSE) in
//            fp32 with flush-to-zero (exp2.approx.ftz, and tensor cores read no subnormal), so
//            those terms are lost whole, together: a key whose every probability is below
//            2^-126 gets a dK and dV row of zero where the reference has 1e-37 (campaigns on
//            the H200, H-4 in docs/findings). Not a rounding unit: no contract removes it.
//   subnormal  fp16 operands only (the fp16 contract), O, dQ, dK and dV: below 2^-14 an fp16
//            number is subnormal, and rounding to it errs by up to eta = 2^-25 absolutely, not by
//            u_op relatively. P is then rounded that way (for P V, P^T dO, and, in kernels that
//            form dS from the rounded P, dS = P (dP - D)), and so is dS. The part this adds to
//            the relative rounding in `operand`, per term, is
//              e(x)^2 = max(0, min(eta, |x|)^2 - (u_op x)^2)
//            and the outputs' parts are sums of those terms' squares, as `operand` is:
//              O: sum_j e(P_ij)^2 V_jd^2             dV: sum_group,i e(P_ij)^2 dO_id^2
//              dQ: scale^2 sum_j f_ij K_jd^2          dK: scale^2 sum_group,i f_ij Q_id^2
//            with f_ij = e(P_ij)^2 (dS_ij / P_ij)^2 + e(dS_ij)^2, each as a variance of / 3. An
//            absolute magnitude (eta is fp16's): bf16's subnormals lie 2^109 times lower and
//            fp32's are the underflow term's. A dK row dominated by two queries whose P were
//            4.6e-7 and 2.9e-7 (fp16: 7.7 and 4.8 subnormal steps) erred by 4.4% along itself
//            in torch.efficient, which forms dS from its rounded P (docs/findings, issue 29).
//            Its own sources, per row, as the operand's (subnormal_sources).
//   normalizer  O and dQ only, a part shared by the whole row: O = (sum_j e_ij V_j) / l_i, and
//            the normalizer l_i (summed at u_acc over L keys) errs by the LSE's accumulation
//            error, relative variance u_acc^2 L / 6, which scales every O_id of the row alike;
//            the backward recomputes P = exp(S - LSE) from the stored LSE, whose whole error
//            (u_lse^2 (1 + LSE^2) / 3 + u_acc^2 L / 6, the LSE's form below) scales every P_ij of
//            query i, hence dS_ij and the whole dQ row, alike:
//              O:  u_acc^2 (L / 6) ref^2      dQ:  (u_lse^2 (1 + LSE_i^2) / 3 + u_acc^2 L / 6) ref^2
//            (dK and dV sum over queries, whose normalizers err independently: the score part.)
//   via_*    dQ and dK only: D = rowsum(dO*O) is computed from the computed O, so O's error
//            (each of its parts above, with O's own L folded into via_acc) moves every dS of
//            the row: dQ_id by scale * (P K)_id * dD_i, dK_jd by scale * sum_i P_ij Q_id dD_i.
//   tied keys  dQ only, in via_sc: where every V row of a key-value head is the same vector (an
//            exact near-constant input), dP_ij = dO_i . V_j is one computation per query row, and
//            its accumulation error e_i (the score part's dP term, dot_error over Dv) is the same
//            number for every key: it moves dS_ij by P_ij e_i, all of the row's keys alike, as D's
//            error does, and reaches dQ_id as scale (P K)_id e_i, not as the root-sum-square over
//            keys the score part counts (sqrt(Skv) times less for a spread row). Where every K row
//            is the same (and no bias varies along the keys), S_ij and P_ij are one number per row
//            too: P's relative error s_i (the score sensitivity, and the softcap chain's) moves every
//            dS_ij by s_i dS_ij, so dQ_id by s_i dQ_id = scale (P K)_id s_i (sum_j dS_ij) / sum_j P_ij.
//            Both are added to dQ's via_sc in quadrature (oracles/tied_keys.h). dK sums over queries,
//            whose e_i and s_i stay independent: the score part already counts them.
//
// How many independent errors a row's statistic averages (harness/tolerance.h judges blocks of
// rows): the elements of one row share the row's reduction terms (every dK_jd sums dS_ij Q_id
// over the same i), so the rounding of one dominant term (a key only one query sees, an
// outlier) moves the whole row at once, and the normalizer part moves it always (one source). A part whose terms have squared magnitudes a_k (summed
// over the row) comes from (sum_k a_k)^2 / sum_k a_k^2 effectively independent sources (the
// participation ratio: 1 for one dominant term, K for K equal ones); the oracle supplies it per
// row for the operand and score parts. D's error reaches a dQ row through one number (D_i):
// one source; the dK via parts share the operand's sources; accumulation errors are independent
// per element (elements of one value count once); storage errors too, unless the row's values
// lie close together on the storage grid (below). The row's degrees of freedom combine the parts
// by their variances V (Satterthwaite):
//
//   dof = (sum_parts V)^2 / sum_parts (V^2 / sources),  clamped to [1, row width]
//
// and at most the elements' own participation, (sum_d var_d)^2 / sum_d var_d^2: errors of any
// covariance C give the row's statistic (tr C)^2 / tr(C^2) independent errors, and
// tr(C^2) >= sum_d C_dd^2 (a row whose variance sits in one column errs as that column).
//
// The participation ratio counts the terms as if each moved the row along its own direction.
// They do not when the terms' vectors share one (the X_k of the sum: V_j for O, K_j for dQ, Q_i
// for dK, dO_i for dV): with near-constant or same-signed inputs every term pushes the row
// along their common mean, and however many terms there are, the row errs as one. And where
// the inputs that make the probabilities are copies of each other (K_j for a query row, Q_i
// for a key row), the probabilities are copies too, and round alike. So each part's sources
// are capped, per row, by how many directions those vectors span as a sum sees them:
//
//   directions(X) = n sum_k |X_k|^2 / |sum_k X_k|^2    (n vectors; 1 when all are equal, about
//                                                      n for zero-mean or orthogonal ones)
//   O: min(directions(V), directions(K))   dQ: directions(K)   over the head's keys
//   dK: directions(Q)   dV: min(directions(dO), directions(Q))  over the GQA group's queries
//
// (a weight-free stand-in for trace(C) / lambda_max(C) of the row's error covariance
// C = sum_k var_k X_k X_k^T: with a common mean of energy fraction f, any spread of weights
// gives lambda_max of about f trace(C)). Every shared part (operand, score, via, normalizer)
// moves the row inside the span of those same vectors, so the cap holds for the shared parts
// together too: their combined sources, (sum V)^2 / sum V^2 / sources, are at most
// directions. A query that sees one key errs along that key however its error splits into parts.
//
// D's error across key rows. A block's statistic (a tile, a head, the tensor: harness/verdict.cpp)
// counts its rows' dof as independent, which they are for every part whose sources are one row's
// own. D's error is not: query i's dD_i moves dS_ij of every key j it sees, so dK_jd gets
// scale P_ij Q_id dD_i in every row j of the block, the same draw. Where few queries reach a block
// (sparse dO rows, a decode call of one query, a saturated softmax whose keys each see one query),
// the block's via part is that few draws spread over many rows. Its sources in a block B are the
// participation over queries of their variances there, per rounding unit (units are independent):
//
//   v_i(B) = scale^2 d_err(i)^2 (sum_{j in B} P_ij^2) (sum_{d in B} Q_id^2)    (sum_i v_i(B) is the
//            block's via variance in that unit, as the elements' via terms sum it)
//   V_via(B) = sum_units w sum_i v_i,  sources(B) = V_via(B)^2 / sum_units w^2 sum_i v_i^2
//
// (w the unit's weight in sigma^2: u_op^2/3, u_st^2/3, u_acc^2, u_sc^2), and the block's dof is
// that of the two parts, the via part's share f = V_via(B) / sum_{e in B} sigma_e^2 with those
// sources and the rest with the dof counted as before (dof_with_shared_part, at most that dof):
//
//   dof(B) = min(dof, 1 / (f^2 / sources + (1 - f)^2 / dof))
//
// Stop 65 (docs/findings, s60): a decode dK tile whose via error came from one query (6 to 12 of a
// KV head's 180 queries have a dO), counted as 130 independent errors: our own tiled kernel and
// LibTorch's CPU flash read 3.96 sigma' against 3.79, cuda.flash and cuDNN on the H100 alike.
// Rows (one row of key j) need no such part: the via part is one source of the row already. The
// normalizer of query i reaches dK and dV rows alike but sits in their score part with the
// per-(i, j) score errors, and is not split out. The CPU oracle set supplies the blocks; the GPU
// set on request (ATTNFUZZ_GPU_VIA_BLOCKS=1, oracles/gpu_oracles.h) until its kernels have run on
// a GPU. A composition's model carries none.
//
// Storage rounding is a sawtooth of the value: x rounds to x + delta s(x / delta), delta the
// storage step at x, s(t) = round(t) - t. Elements whose values lie within a small part of a
// step of each other round alike (a row of O where V is near constant: every element about 0.1,
// so the row's whole stored rounding is one number times the row), and elements spread over a
// step or more round independently. Under a random offset, two elements' stored errors correlate
// as R(t - t') = (6 / pi^2) sum_k cos(2 pi k (t - t')) / k^2, so the mean correlation of a row's
// pairs, weighted by the elements' rounding sizes a_d = u_st |ref_d|, is
//
//   c = sum_k w_k (rho_k - p) / (1 - p),   rho_k = |sum_d a_d exp(2 pi i k t_d)|^2 / (sum_d a_d)^2,
//   p = sum_d a_d^2 / (sum_d a_d)^2,       w_k proportional to 1 / k^2   (t_d = ref_d / delta_d; k = 1..4)
//
// (rho_k is about p times an exponential draw for unrelated values), less five standard
// deviations of that noise (5 * 0.73 p), clamped to [0, 1]; and the storage part has
// n / (1 + (n - 1) c) sources (the design
// effect of n = the row's distinct values with mean correlation c): n for spread rows, 1 for a
// row of near-equal values. Stop 54: cudnn's and torch.efficient's bf16 O row of near-constant V
// at 12.04 sigma' along itself against 12, with identical errors in both libraries.
//
// dBias (a bias that requires a gradient) sums dS_ij over the dimensions the bias broadcasts, dS
// taken before the softcap's chain factor (the bias comes after the softcap). Its element e sums
// the terms (b, h, i, j) the broadcast maps to it, and each term has dQ's parts without the
// product with K:
//   operand  sqrt(sum dS^2 + (P dP)^2 + (P (D - g))^2)       (dS, or an unfused graph's P dP, P D, rounded)
//   score    sqrt(sum (|dS| s_ij + P dP_err)^2)               (P's score error, dP's accumulation)
//   via      sqrt(sum (P_ij dD_i)^2), per rounding unit      (D's error, as for dQ)
//   normalizer  u_lse^2 sum dS^2 (1 + LSE_i^2) / 3 + u_acc^2 sum dS^2 Skv / 6   (the stored LSE
//            scales P, hence dS, of row i: dQ's normalizer, element by element)
//   underflow   sum |dS| over the terms whose P is below 2^-126; subnormal: sum of f_ij (fp16)
//   L        the number of terms summed (1 for a bias that spans every dimension)
// A row is the bias's last dimension. Different elements sum different terms: the operand, score
// and subnormal parts have the participation ratio of the elements' variances as sources; the
// via and normalizer parts count as one source a row (D_i and LSE_i move a row of dS together).
//
// LSE (fp32 for every dtype, on an absolute scale) has its own form:
//   sigma^2 = u_lse^2 * (1 + LSE^2) / 3 + u_acc^2 * L / 6 + (u_acc^2 + u_in^2) * score^2
//           + u_tr^2 * truncation^2
// with score = sqrt(sum_j P_ij^2 s_ij^2) and u_lse the backend's declared LSE accuracy.
//   truncation  tensor cores (bf16, fp16 and tf32 operands on a GPU: u_tr = u_acc, else 0) add
//            each MMA step's products to the fp32 accumulator c and truncate the sum toward zero,
//            by up to one ulp of c: an error of about -u_acc c per step, the same sign for every
//            key of a row whose scores share their sign, where round-to-nearest errs at random.
//            Over steps of 16 products (the MMA's k for 16-bit operands), the partial sums
//            c_m = sum_{d < 16 (m + 1)} Q_id K_jd add up to sum_d w_d Q_id K_jd with
//            w_d = ceil(Dqk / 16) - floor(d / 16), the number of steps product d is carried
//            through (tf32's steps of 8 about double it: u_tr = 2 u_acc there). The LSE errs by
//            the P-weighted mean of its scores' errors, so
//              truncation_i = scale |sum_j P_ij c_ij sum_d w_d Q_id K_jd|
//            (c_ij the softcap's chain factor 1 - tanh^2, 1 without). The rounding part (score)
//            averages over a spread row's keys; this one does not: rows whose scores all sit far
//            from zero (an LSE of -850) err by 3-10 u_acc |LSE| in LibTorch's flash, efficient and
//            cuDNN kernels and in a Triton tl.dot and cuBLAS alike, toward zero in every row, and
//            by 0.5 where the large product comes last (docs/findings/standalone/
//            tensor_core_accumulation_bias.py, H100). Only the LSE: O and the gradients see the
//            scores through exp(S - LSE), where a row's common error cancels.
#include <array>
#include <functional>
#include <optional>
#include <string_view>

#include "harness/contract.h"
#include "harness/dtype.h"
#include "harness/tensor.h"
#include "harness/model_row.h"
#include "harness/tensors.h"

namespace attnfuzz {

struct Shape;

// The tile of the via blocks the CPU oracle set supplies (TermTensors::via_block_tile): the
// verdict's tile (ToleranceRule::tile by default).
inline constexpr int64_t kSharedTile = 16;
struct TermTensors {
  Tensor operand, stored, score;  // shaped like the output
  double length = 1;              // L
  // D's error reaching dQ and dK, one part per rounding unit (empty for O, LSE, dV).
  Tensor via_op, via_st, via_acc, via_sc;
  // dK and dV: the lost terms of P below 2^-126 (above); empty elsewhere, and where the oracle
  // does not supply them.
  Tensor underflow;
  // O, dQ, dK, dV of an fp16 problem: the subnormal part (above, absolute), and its sources per
  // row; empty for other dtypes and where the oracle does not supply them.
  Tensor subnormal, subnormal_sources;
  // Per row ([B][H][S]), the effective number of independent sources of the operand and the
  // score parts (above); empty where the oracle does not supply them (every element then
  // counts as independent).
  Tensor operand_sources, score_sources;
  // O and dQ: the reference LSE of each row ([B][H][S]), for the normalizer part (above); where
  // empty, LSE_i is taken as 0. Attached by the harness (attach_row_lse), not by the oracles.
  Tensor row_lse;
  // Per row ([B][H][S]), the cap on the operand and score parts' sources from the directions
  // of the sum's terms (above); empty: no cap. Attached by the harness (attach_directions).
  Tensor direction_sources;
  // dBias only: sqrt(sum dS^2 (1 + LSE_i^2)) and sqrt(sum dS^2 Skv) over the terms each element
  // sums, the normalizer part's magnitudes (above); empty elsewhere.
  Tensor normalizer_lse, normalizer_acc;
  // LSE only, per row: the tensor cores' truncation (above, steps of 16 products); empty: none.
  Tensor truncation;
  // dK only: D's error per block of key rows ("D's error across key rows" above), per rounding
  // unit (the order of via_op, via_st, via_acc, via_sc): over the queries i whose D reaches the
  // block, sum_i v_i and sum_i v_i^2 of each query's part of the block's via variance,
  //   v_i = scale^2 d_err(i)^2 (sum_{j in block} P_ij^2) (sum_{d in block} Q_id^2),
  // per tile of via_block_tile keys x via_block_tile columns ([B][Hkv][key tiles][column tiles][4])
  // and per head ([B][Hkv][4]). Empty where the oracle does not supply them (the GPU oracle set).
  int64_t via_block_tile = 0;
  std::vector<double> via_tile_sum, via_tile_sum_sq, via_head_sum, via_head_sum_sq;
};
struct ErrorTerms {
  std::array<TermTensors, kOutputs.size()> by_output;  // indexed by output_index
  const TermTensors& operator[](TensorId t) const { return by_output[output_index(t)]; }
  TermTensors& operator[](TensorId t) { return by_output[output_index(t)]; }
};

// Sizes dK's via blocks for shape `s` (TermTensors::via_block_tile = kSharedTile, every sum 0):
// the one layout both oracle sets fill.
void size_via_blocks(TermTensors& dk, const Shape& s);

// Gives O's and dQ's terms the reference LSE their normalizer part needs.
void attach_row_lse(ErrorTerms& terms, const Tensor& lse);

// Gives every output's terms the per-row cap on their sources from the directions of the
// problem's inputs (above); d_out is the call's upstream gradient of O.
struct Problem;
void attach_directions(ErrorTerms& terms, const Problem& p, const Tensor& d_out);
// directions(X) above, of n vectors of `dim` values stored one after another.
double directions(const double* x, int64_t n, int64_t dim);

// The contract's rounding units for inputs of dtype `d` (RoundingUnits: harness/model_row.h).
// tensor_cores: the backend accumulates its scores on tensor cores (Backend::accumulates_on_tensor_cores),
// which truncate only under the contracts with 16-bit or tf32 operands.
RoundingUnits rounding_units(Contract c, DType d, double lse_unit_roundoff, bool tensor_cores = false);

// L, the length of output t's last reduction: Skv for O, LSE and dQ; Sq times the GQA group
// for dK and dV.
double reduction_length(TensorId t, const Shape& s);

// The variance of one element's own storage rounding (ref: the float64 value): u_st^2 ref^2 / 3,
// and u_lse^2 (1 + LSE^2) / 3 for the LSE.
double storage_variance(TensorId t, double ref, const RoundingUnits& u);

// sigma per element of output `t` (the formulas above); `ref` is the float64 output.
Tensor model_sigma(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u);

// The degrees of freedom of each row's error (above), shaped [B][H][S]; empty for the LSE
// (one element a row) and where the terms carry no sources.
Tensor model_row_dof(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u);
// The sources of a row's storage rounding (above): `distinct` (the row's distinct values) for
// values spread over the storage grid of unit roundoff `unit_store`, down to 1 for near-equal ones.
double storage_sources(const double* ref, int64_t n, double unit_store, double distinct);
// Both in one pass over the elements (each element's variance computed once): the same bits.
struct ModelOfOutput {
  Tensor sigma, row_dof;
};
// Where model_sigma_and_row_dof runs when not here: on the device (oracles/gpu_oracles.h,
// cuda_output_model), the same bits. Empty: on the host.
using OutputModel = std::function<ModelOfOutput(TensorId, const TermTensors&, const Tensor& ref, const RoundingUnits&)>;
ModelOfOutput model_sigma_and_row_dof(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u);
// How output t is modelled, wherever it runs: by rows with a dof (a [B][H][S][D] output other than
// the LSE whose terms carry sources) or element by element, and the row width the elements'
// row index divides by (1 for the LSE).
struct ModelShape {
  bool row_dof = false;
  int64_t width = 1;
};
ModelShape model_shape(TensorId t, const TermTensors& terms, const Tensor& ref);

// Through a composition every call is a problem of its own (its P, its D, its upstream
// gradients dO_k = w_k dO and dLSE_k: harness/merge.h), so the model is evaluated per call
// and combined the way the composition combines the calls' outputs: independent errors add
// as variances; a merge's O = sum_k w_k O_k weights part k's by w_k = exp(LSE_k - LSE) (its
// LSE too, to first order); dQ rows are placed, dK and dV rows summed; the rows' dof combine
// as above (each call's row a part of variance V_k with dof_k).
struct ModelOfCall {
  TensorId output;
  Tensor sigma, row_dof;   // model_sigma and model_row_dof of the call's output
  const Tensor* weight;    // [B][H][Sq] of the call, w_k (O and LSE), or null (1)
  int64_t row_offset = 0;  // where the call's rows sit in the whole output
};
// Adds one call's model into the whole output's: sum_sigma2 += w^2 sigma^2 at its rows, and
// the rows' variances and variance^2 / dof (for the combined dof) into row_var, row_var2_dof.
void add_call_model(const ModelOfCall& m, Tensor& sum_sigma2, Tensor& row_var, Tensor& row_var2_dof);
// The whole output's sigma and row dof from those sums (dof clamped to [1, width]).
void finish_combined_model(Tensor& sum_sigma2, const Tensor& row_var, const Tensor& row_var2_dof, Tensor* row_dof);

// How much of a block's modelled variance comes from sources that reach several of its rows
// ("D's error across key rows" above): the share of the block's variance and the number of
// independent sources it has, per tile of `tile` rows x `tile` columns ([heads][row tiles][column
// tiles]), per head and for the whole tensor. Empty (no heads): no such part.
struct SharedAcrossRows {
  int64_t tile = 0, row_tiles = 0, col_tiles = 0;
  std::vector<double> tile_share, tile_sources, head_share, head_sources;
  double tensor_share = 0, tensor_sources = 0;
  bool empty() const { return head_share.empty(); }
};
// A block of `dof` independent errors, a `share` of whose variance comes from `sources` shared
// ones: the Satterthwaite dof of the two parts, 1 / (share^2 / sources + (1 - share)^2 / dof), at
// most dof.
double dof_with_shared_part(double dof, double share, double sources);
// The shares of dK from its terms' via blocks and its model (sigma); empty without via blocks.
SharedAcrossRows shared_across_rows(const TermTensors& terms, const Tensor& sigma, const RoundingUnits& u);

// The model of every output of one run: sigma per element, the dof of each row and the blocks'
// parts shared across rows, indexed by output_index (row_dof empty where every element counts as
// independent).
struct OutputsModel {
  std::array<Tensor, kOutputs.size()> sigma, row_dof;
  std::array<SharedAcrossRows, kOutputs.size()> shared;
};
using OutputTensors = std::array<const Tensor*, kOutputs.size()>;  // one tensor per output, indexed by output_index

// The whole problem run as one call: model_sigma_and_row_dof of each output.
OutputsModel model_of_call(const ErrorTerms& terms, const OutputTensors& ref, const RoundingUnits& u, const OutputModel& where = {});

// One call of a composition as its model needs it: its terms and float64 outputs, the weight
// w_k = exp(LSE_k - LSE) with which its O and LSE reach the whole output, and where its query
// and key rows sit in the whole problem.
struct CallOfComposition {
  const ErrorTerms* terms = nullptr;
  OutputTensors outputs{};
  const Tensor* weight = nullptr;  // [B][H][Sq_k]
  int64_t q_offset = 0, kv_offset = 0;
};
// The model of a run through a composition. Per output:
//   sum over calls (add_call_model), plus the combined output's own storage rounding
//   (storage_variance: a GPU merge writes fp32, the parts' sums the case dtype), finished
//   (finish_combined_model);
//   then sigma = max(sigma, sigma_whole) per element and dof = min(dof, dof_whole) per row.
// The per-call model does not carry every path of a merge (the parts' LSE errors moving the
// merged O through w_k, the merged forward's errors reaching the parts' upstream gradients);
// `whole`, the whole problem's model (model_of_call), covers them through its score and via terms.
OutputsModel composed_model(const std::vector<CallOfComposition>& calls, const OutputTensors& ref, const OutputsModel& whole,
                            const RoundingUnits& u, const OutputModel& where = {});

// e(x)^2 of the subnormal part (above): what rounding x to fp16 adds, in the subnormal range, to
// its relative rounding u_op |x| (2^-14 is fp16's smallest normal, 2^-25 half its subnormal step).
inline constexpr double kFp16SubnormalHalfStep = 0x1p-25, kFp16UnitRoundoff = 0x1p-11;
inline double fp16_subnormal_excess2(double x) {
  const double a = x < 0 ? -x : x, floor = a < kFp16SubnormalHalfStep ? a : kFp16SubnormalHalfStep, rel = kFp16UnitRoundoff * a;
  return floor > rel ? floor * floor - rel * rel : 0.0;
}

// The participation ratio (sum a)^2 / sum a^2 from the two sums; 0 where there are no terms.
inline double participation(double sum, double sum_sq) { return sum_sq > 0 ? sum * sum / sum_sq : 0.0; }

}  // namespace attnfuzz
