// The vector types of the kernel files, per Highway target: included inside each
// file's per-target namespace (after `namespace hn`), once per target -- hence no
// include guard.

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DH = hn::Half<DF>;                 // half a float vector
using DD = hn::Repartition<double, DF>;  // doubles: Lanes(DF) / 2
using DI64 = hn::RebindToSigned<DD>;
using DU64 = hn::RebindToUnsigned<DD>;
using VF = hn::Vec<DF>;
using VD = hn::Vec<DD>;
