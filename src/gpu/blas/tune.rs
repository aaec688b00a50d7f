//! Why: cuBLAS's default kernel is not always the fastest for the engine's shapes (3 % of a
//! batch-64 step on an H200, gpu-run13): the tuned path times cuBLASLt's heuristic candidates
//! per shape and keeps the fastest ([`super::Blas::enable_tuning`]); the choices persist through
//! [`crate::gpu::gemm_plans`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use cudarc::cublas::sys as bs;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::{result as dr, sys as ds};

use super::{Blas, OutType};
use crate::gpu::gemm_plans::GemmPlans;

/// What makes two GEMM calls the same problem for cuBLASLt.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) struct Shape {
    pub(super) t: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) ldx: usize,
    pub(super) ldy: usize,
    pub(super) out: OutType,
    pub(super) acc: bool,
}

pub(super) struct Plan {
    desc: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    c: lt::cublasLtMatrixLayout_t,
    cands: Vec<lt::cublasLtMatmulAlgo_t>,
    /// Index into `cands` in use; None until timed.
    best: Option<usize>,
    /// Operands of the first call (valid workspace buffers) for a deferred tuning.
    x: u64,
    w: u64,
}

pub(super) struct Tuner {
    handle: lt::cublasLtHandle_t,
    plans: HashMap<Shape, Plan>,
    /// Where the choices are saved (and were loaded from), if anywhere.
    file: Option<PathBuf>,
    /// Every choice made or loaded, by [`Shape::key`] (what `file` holds).
    chosen: GemmPlans,
}

impl Shape {
    fn key(&self) -> String {
        format!(
            "{}x{}x{} ldx{} ldy{} {:?}{}",
            self.t,
            self.n,
            self.k,
            self.ldx,
            self.ldy,
            self.out,
            if self.acc { " acc" } else { "" }
        )
    }
}

fn lt_ok(st: lt::cublasStatus_t, what: &str) -> Result<()> {
    if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(anyhow!("cuBLASLt {what} failed: {st:?}"))
    }
}

impl Drop for Tuner {
    fn drop(&mut self) {
        unsafe {
            for p in self.plans.values() {
                let _ = lt::cublasLtMatrixLayoutDestroy(p.a);
                let _ = lt::cublasLtMatrixLayoutDestroy(p.b);
                let _ = lt::cublasLtMatrixLayoutDestroy(p.c);
                let _ = lt::cublasLtMatmulDescDestroy(p.desc);
            }
            let _ = lt::cublasLtDestroy(self.handle);
        }
    }
}

impl Blas {
    /// A GEMM through the tuned path: the shape's plan (made, and timed when outside a
    /// capture, on first use), then its chosen kernel.
    pub(super) fn tuned_gemm(&self, sh: Shape, x: u64, w: u64, y: u64) -> Result<()> {
        self.plan(sh, x, w)?;
        let tu = self.tune.as_ref().expect("tuned_gemm without tuning");
        if !self.capturing()? && tu.borrow().plans[&sh].best.is_none() {
            self.tune_one(&sh)?;
        }
        let ci = tu.borrow().plans[&sh].best.unwrap_or(0);
        self.lt_run(&sh, ci, Some((x, w)), y)
    }

    /// Switch to tuned cuBLASLt GEMMs; `plans`: a file of earlier choices to reuse (when it
    /// exists and was made on this GPU and cuBLASLt) and to save new choices to.
    pub fn enable_tuning(&mut self, gpu_name: &str, plans: Option<&Path>) -> Result<()> {
        if let Some(t) = &self.tune {
            let t = t.borrow();
            if t.file.as_deref() == plans {
                return Ok(());
            }
        }
        let version = unsafe { lt::cublasLtGetVersion() };
        let chosen = match plans {
            Some(p) if p.exists() => GemmPlans::load(p, gpu_name, version)?,
            _ => None,
        }
        .unwrap_or_else(|| GemmPlans::new(gpu_name, version));
        // Called before any GEMM runs; a tuner switched to another file starts over.
        self.tune = None;
        let mut handle = std::ptr::null_mut();
        lt_ok(unsafe { lt::cublasLtCreate(&mut handle) }, "create")?;
        self.tune = Some(RefCell::new(Tuner {
            handle,
            plans: HashMap::new(),
            file: plans.map(Path::to_path_buf),
            chosen,
        }));
        Ok(())
    }

    pub(super) fn capturing(&self) -> Result<bool> {
        let mut st = ds::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let r = unsafe { ds::cuStreamIsCapturing(self.stream, &mut st) };
        if r != ds::CUresult::CUDA_SUCCESS {
            return Err(anyhow!("cuStreamIsCapturing failed: {r:?}"));
        }
        Ok(st != ds::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Time every untuned plan's candidates (outside any capture); true when some plan was
    /// tuned, so a graph captured with the untuned choice should be captured again.
    pub fn tune_pending(&self) -> Result<bool> {
        let Some(tu) = &self.tune else {
            return Ok(false);
        };
        let pending: Vec<Shape> = tu
            .borrow()
            .plans
            .iter()
            .filter(|(_, p)| p.best.is_none())
            .map(|(s, _)| *s)
            .collect();
        for sh in &pending {
            self.tune_one(sh)?;
        }
        Ok(!pending.is_empty())
    }

    /// Run each candidate of `sh` a few times into a scratch output; keep the fastest.
    pub(super) fn tune_one(&self, sh: &Shape) -> Result<()> {
        let tu = self.tune.as_ref().unwrap();
        let esz = if sh.out == OutType::F32 { 4 } else { 2 };
        let scratch = unsafe { dr::malloc_sync(sh.t * sh.ldy * esz) }
            .map_err(|e| anyhow!("tuning scratch: {e:?}"))?;
        let n_cands = tu.borrow().plans[sh].cands.len();
        // Per candidate: enough repetitions for ≥ 2 ms of timed work (small shapes are noise
        // otherwise), twice round-robin so that a clock change mid-way favours none; the
        // best of the two rounds counts. A candidate that fails to run is skipped.
        let mut per_rep: Vec<Option<f32>> = vec![None; n_cands];
        for _round in 0..2 {
            for (ci, slot) in per_rep.iter_mut().enumerate() {
                if self.lt_run(sh, ci, None, scratch).is_err() {
                    continue;
                }
                let mut reps = 3usize;
                let mut t = self.time_reps(sh, ci, scratch, reps)?;
                while let Some(ms) = t {
                    if ms >= 2.0 || reps >= 256 {
                        break;
                    }
                    reps = (reps * (2.0 / ms.max(1e-3)).ceil() as usize).min(256);
                    t = self.time_reps(sh, ci, scratch, reps)?;
                }
                if let Some(ms) = t {
                    let v = ms / reps as f32;
                    *slot = Some(slot.map_or(v, |o: f32| o.min(v)));
                }
            }
        }
        let times: Vec<(f32, usize)> = per_rep
            .iter()
            .enumerate()
            .filter_map(|(ci, t)| t.map(|t| (t, ci)))
            .collect();
        unsafe { dr::stream::synchronize(self.stream as _) }.map_err(|e| anyhow!("{e:?}"))?;
        unsafe {
            let _ = dr::free_sync(scratch);
        }
        // Ties (within 1 %) go to the heuristic's order.
        let fastest = times.iter().map(|t| t.0).fold(f32::INFINITY, f32::min);
        let best = times
            .iter()
            .find(|t| t.0 <= fastest * 1.01)
            .map(|t| t.1)
            .unwrap_or(0);
        if crate::gpu::tuning::gemm_tune_log() {
            eprintln!("gemm tune {sh:?}: {:?} -> {best}", times);
        }
        let mut t = tu.borrow_mut();
        let p = t.plans.get_mut(sh).unwrap();
        p.best = Some(best);
        let words = p.cands[best].data;
        t.chosen.plans.insert(sh.key(), words);
        match &t.file {
            Some(f) => t.chosen.save(f),
            None => Ok(()),
        }
    }

    /// Milliseconds for `reps` back-to-back runs of candidate `ci` (None if one failed).
    fn time_reps(&self, sh: &Shape, ci: usize, scratch: u64, reps: usize) -> Result<Option<f32>> {
        let er = |e: dr::DriverError| anyhow!("CUDA event while tuning: {e:?}");
        let e0 = dr::event::create(ds::CUevent_flags::CU_EVENT_DEFAULT).map_err(er)?;
        let e1 = dr::event::create(ds::CUevent_flags::CU_EVENT_DEFAULT).map_err(er)?;
        let res = (|| {
            unsafe { dr::event::record(e0, self.stream as _) }.map_err(er)?;
            let mut ok = true;
            for _ in 0..reps {
                ok &= self.lt_run(sh, ci, None, scratch).is_ok();
            }
            unsafe { dr::event::record(e1, self.stream as _) }.map_err(er)?;
            unsafe { dr::stream::synchronize(self.stream as _) }.map_err(er)?;
            let ms = unsafe { dr::event::elapsed(e0, e1) }.map_err(er)?;
            Ok(ok.then_some(ms))
        })();
        unsafe {
            let _ = dr::event::destroy(e0);
            let _ = dr::event::destroy(e1);
        }
        res
    }

    /// Enqueue candidate `ci` of `sh`: y = x·wᵀ (+ y). `xw` None: the plan's recorded operands.
    pub(super) fn lt_run(
        &self,
        sh: &Shape,
        ci: usize,
        xw: Option<(u64, u64)>,
        y: u64,
    ) -> Result<()> {
        let tu = self.tune.as_ref().unwrap().borrow();
        let p = &tu.plans[sh];
        let (x, w) = xw.unwrap_or((p.x, p.w));
        let alpha = 1.0f32;
        let beta = if sh.acc { 1.0f32 } else { 0.0 };
        let st = unsafe {
            lt::cublasLtMatmul(
                tu.handle,
                p.desc,
                &alpha as *const f32 as *const c_void,
                w as *const c_void,
                p.a,
                x as *const c_void,
                p.b,
                &beta as *const f32 as *const c_void,
                y as *const c_void,
                p.c,
                y as *mut c_void,
                p.c,
                &p.cands[ci],
                self.workspace.ptr as *mut c_void,
                self.workspace.bytes,
                self.stream as _,
            )
        };
        lt_ok(st, "matmul")
    }

    /// The plan for `sh` (created with its heuristic candidates when new).
    pub(super) fn plan(&self, sh: Shape, x: u64, w: u64) -> Result<()> {
        let tu = self.tune.as_ref().unwrap();
        if tu.borrow().plans.contains_key(&sh) {
            return Ok(());
        }
        let h = tu.borrow().handle;
        let ctype = match sh.out {
            OutType::Bf16 => lt::cudaDataType::CUDA_R_16BF,
            OutType::F32 => lt::cudaDataType::CUDA_R_32F,
        };
        let bf = lt::cudaDataType::CUDA_R_16BF;
        unsafe {
            let mut desc = std::ptr::null_mut();
            lt_ok(
                lt::cublasLtMatmulDescCreate(
                    &mut desc,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType::CUDA_R_32F,
                ),
                "desc",
            )?;
            let ta = bs::cublasOperation_t::CUBLAS_OP_T;
            lt_ok(
                lt::cublasLtMatmulDescSetAttribute(
                    desc,
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    &ta as *const _ as *const c_void,
                    std::mem::size_of_val(&ta),
                ),
                "transa",
            )?;
            // Column-major view as in `gemm`: A = W (k × n, transposed), B = Xᵀ (k × t).
            let mut a = std::ptr::null_mut();
            let mut b = std::ptr::null_mut();
            let mut c = std::ptr::null_mut();
            lt_ok(
                lt::cublasLtMatrixLayoutCreate(&mut a, bf, sh.k as u64, sh.n as u64, sh.k as i64),
                "layout a",
            )?;
            lt_ok(
                lt::cublasLtMatrixLayoutCreate(&mut b, bf, sh.k as u64, sh.t as u64, sh.ldx as i64),
                "layout b",
            )?;
            lt_ok(
                lt::cublasLtMatrixLayoutCreate(
                    &mut c,
                    ctype,
                    sh.n as u64,
                    sh.t as u64,
                    sh.ldy as i64,
                ),
                "layout c",
            )?;
            let mut pref = std::ptr::null_mut();
            lt_ok(lt::cublasLtMatmulPreferenceCreate(&mut pref), "pref")?;
            let wsb = self.workspace.bytes as u64;
            lt_ok(
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    &wsb as *const u64 as *const c_void,
                    8,
                ),
                "pref workspace",
            )?;
            let mut res: Vec<lt::cublasLtMatmulHeuristicResult_t> = vec![std::mem::zeroed(); 16];
            let mut got = 0i32;
            lt_ok(
                lt::cublasLtMatmulAlgoGetHeuristic(
                    h,
                    desc,
                    a,
                    b,
                    c,
                    c,
                    pref,
                    16,
                    res.as_mut_ptr(),
                    &mut got,
                ),
                "heuristic",
            )?;
            let _ = lt::cublasLtMatmulPreferenceDestroy(pref);
            let cands: Vec<_> = res[..got.max(0) as usize]
                .iter()
                .filter(|r| r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
                .map(|r| r.algo)
                .collect();
            if cands.is_empty() {
                return Err(anyhow!("cuBLASLt has no algorithm for {sh:?}"));
            }
            // A choice saved by an earlier run is used as is (same kernel, same bytes).
            let (cands, best) = match tu.borrow().chosen.plans.get(&sh.key()) {
                Some(words) => {
                    let mut a: lt::cublasLtMatmulAlgo_t = std::mem::zeroed();
                    a.data = *words;
                    (vec![a], Some(0))
                }
                None => (cands, None),
            };
            tu.borrow_mut().plans.insert(
                sh,
                Plan {
                    desc,
                    a,
                    b,
                    c,
                    cands,
                    best,
                    x,
                    w,
                },
            );
        }
        Ok(())
    }
}
