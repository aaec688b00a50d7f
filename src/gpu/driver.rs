//! The thin layer over the CUDA driver the engine needs: one context and stream per device,
//! raw device buffers, the kernel module, launches, events and CUDA graphs.
//!
//! cudarc is used with `dynamic-loading`: nothing CUDA is linked, libcuda is opened on first
//! use. cudarc panics when a library is missing, so [`Gpu::open`] turns that into an error —
//! a binary built with `--features cuda` still starts, and runs the CPU path, without a driver.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::{result as dr, sys, CudaContext};

use super::nvrtc;

/// Map a driver error to an `anyhow` error naming the operation.
pub fn cu<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> anyhow::Error {
    move |e| anyhow!("CUDA {what} failed: {e:?}")
}

/// `args!(a, b, c)` → the `void*` array `cuLaunchKernel` takes (each value must outlive the call).
#[macro_export]
macro_rules! kargs {
    ($($a:expr),* $(,)?) => {
        [$(($a) as *const _ as *mut ::std::ffi::c_void),*]
    };
}

/// One GPU: its context (bound to the calling thread), one stream, the compiled kernels.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: sys::CUstream,
    pub ordinal: usize,
    pub name: String,
    pub arch: String,
    /// Streaming multiprocessors.
    pub sm_count: usize,
    module: sys::CUmodule,
}

/// A device allocation, freed on drop.
pub struct DevBuf {
    pub ptr: u64,
    pub bytes: usize,
}

impl DevBuf {
    /// Refuse a copy (`what`: read or write) of `n` bytes at `byte_off` past the buffer's end.
    fn check_span(&self, what: &str, byte_off: usize, n: usize) -> Result<()> {
        if byte_off + n > self.bytes {
            bail!(
                "device {what} of {n} bytes at {byte_off} overflows a {}-byte buffer",
                self.bytes
            );
        }
        Ok(())
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ptr != 0 {
            unsafe {
                let _ = dr::free_sync(self.ptr);
            }
        }
    }
}

/// A loaded kernel entry point.
#[derive(Clone, Copy)]
pub struct Kernel(pub sys::CUfunction);

impl Gpu {
    /// Open device `ordinal`, compile (or load from the cache) the kernels for its architecture.
    pub fn open(ordinal: usize) -> Result<Self> {
        // cudarc panics (printing a long message) when libcuda is absent: silence the hook
        // for this call and report one clear error instead.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal));
        std::panic::set_hook(hook);
        let ctx = ctx
            .map_err(|_| {
                anyhow!(
                    "--device cuda:{ordinal}: cannot load the CUDA driver (libcuda.so.1); \
                     is this a GPU machine with the NVIDIA driver installed?"
                )
            })?
            .map_err(|e| anyhow!("--device cuda:{ordinal}: cannot open the GPU: {e:?}"))?;
        ctx.bind_to_thread().map_err(cu("bind context"))?;
        let (maj, min) = ctx.compute_capability().map_err(cu("compute capability"))?;
        if maj < 8 {
            bail!("--device cuda:{ordinal}: compute capability {maj}.{min}; the bf16 tensor-core kernels need 8.0 or newer");
        }
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        // Hopper gets the arch-specific sm_90a target: the wgmma attention needs it (the other
        // kernels compile the same for sm_90 and sm_90a).
        let arch = if (maj, min) == (9, 0) {
            "sm_90a".to_string()
        } else {
            format!("sm_{maj}{min}")
        };
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cu("multiprocessor count"))? as usize;
        let stream =
            dr::stream::create(dr::stream::StreamKind::NonBlocking).map_err(cu("stream create"))?;
        let cubin = nvrtc::cubin_cached(&arch)?;
        let module = unsafe { dr::module::load_data(cubin.as_ptr() as *const c_void) }
            .map_err(cu("module load"))?;
        Ok(Self {
            ctx,
            stream,
            ordinal,
            name,
            arch,
            sm_count,
            module,
        })
    }

    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let f = unsafe { dr::module::get_function(self.module, CString::new(name).unwrap()) }
            .map_err(|e| anyhow!("kernel {name} missing from the compiled module: {e:?}"))?;
        Ok(Kernel(f))
    }

    /// Let `k` use `bytes` of dynamic shared memory (over the 48 KiB default).
    pub fn set_max_dynamic_smem(&self, k: Kernel, bytes: usize) -> Result<()> {
        unsafe {
            dr::function::set_function_attribute(
                k.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        }
        .map_err(cu("set dynamic shared memory"))
    }

    pub fn alloc(&self, bytes: usize) -> Result<DevBuf> {
        let ptr = unsafe { dr::malloc_sync(bytes.max(16)) }
            .map_err(|e| anyhow!("cudaMalloc of {bytes} bytes failed: {e:?}"))?;
        Ok(DevBuf { ptr, bytes })
    }

    pub fn upload<T: Copy>(&self, host: &[T]) -> Result<DevBuf> {
        let buf = self.alloc(std::mem::size_of_val(host))?;
        if !host.is_empty() {
            unsafe { dr::memcpy_htod_sync(buf.ptr, host) }.map_err(cu("copy to device"))?;
        }
        Ok(buf)
    }

    /// Copy host data into an existing buffer (at a byte offset) once the stream's pending
    /// work is done (the copy is synchronous and not ordered with our non-blocking stream).
    pub fn write<T: Copy>(&self, dst: &DevBuf, byte_off: usize, host: &[T]) -> Result<()> {
        let n = std::mem::size_of_val(host);
        dst.check_span("write", byte_off, n)?;
        self.sync()?;
        if n > 0 {
            unsafe { dr::memcpy_htod_sync(dst.ptr + byte_off as u64, host) }
                .map_err(cu("copy to device"))?;
        }
        Ok(())
    }

    /// Wait for the stream, then copy `host.len()` elements from `src` (+ byte offset).
    pub fn read<T: Copy>(&self, src: &DevBuf, byte_off: usize, host: &mut [T]) -> Result<()> {
        let n = std::mem::size_of_val(host);
        src.check_span("read", byte_off, n)?;
        self.sync()?;
        if n > 0 {
            unsafe { dr::memcpy_dtoh_sync(host, src.ptr + byte_off as u64) }
                .map_err(cu("copy to host"))?;
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<()> {
        unsafe { dr::stream::synchronize(self.stream) }.map_err(cu("stream synchronize"))
    }

    /// (free, total) device memory in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        dr::mem_get_info().map_err(cu("memory info"))
    }

    pub fn launch(
        &self,
        k: Kernel,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        unsafe { dr::launch_kernel(k.0, grid, block, smem, self.stream, args) }
            .map_err(cu("kernel launch"))
    }

    /// Capture everything `f` enqueues on the stream into an instantiated CUDA graph.
    pub fn capture(&self, f: impl FnOnce() -> Result<()>) -> Result<Graph> {
        unsafe {
            dr::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(cu("begin graph capture"))?;
        let body = f();
        let graph = unsafe { dr::stream::end_capture(self.stream) };
        body.context("while capturing the step graph")?;
        let graph = graph.map_err(cu("end graph capture"))?;
        let exec = unsafe { dr::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }
            .map_err(cu("graph instantiate"))?;
        Ok(Graph { graph, exec })
    }

    pub fn replay(&self, g: &Graph) -> Result<()> {
        unsafe { dr::graph::launch(g.exec, self.stream) }.map_err(cu("graph launch"))
    }

    /// Record an event on the stream now (profiling: [`Self::elapsed_ms`] between two).
    pub fn record(&self) -> Result<Event> {
        let e = dr::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(cu("event"))?;
        unsafe { dr::event::record(e, self.stream) }.map_err(cu("event record"))?;
        Ok(Event(e))
    }

    /// Milliseconds between two recorded events (after a sync); destroys neither.
    pub fn elapsed_ms(&self, a: &Event, b: &Event) -> Result<f32> {
        unsafe { dr::event::elapsed(a.0, b.0) }.map_err(cu("event elapsed"))
    }

    /// Destroy a recorded event.
    pub fn destroy_event(&self, e: Event) {
        unsafe {
            let _ = dr::event::destroy(e.0);
        }
    }

    /// Milliseconds of device time taken by what `f` enqueues (events around it, then a sync).
    pub fn time_ms(&self, f: impl FnOnce() -> Result<()>) -> Result<f32> {
        let a = dr::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(cu("event"))?;
        let b = dr::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(cu("event"))?;
        unsafe { dr::event::record(a, self.stream) }.map_err(cu("event record"))?;
        f()?;
        unsafe { dr::event::record(b, self.stream) }.map_err(cu("event record"))?;
        self.sync()?;
        let ms = unsafe { dr::event::elapsed(a, b) }.map_err(cu("event elapsed"))?;
        unsafe {
            let _ = dr::event::destroy(a);
            let _ = dr::event::destroy(b);
        }
        Ok(ms)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        unsafe {
            let _ = dr::stream::synchronize(self.stream);
            let _ = dr::module::unload(self.module);
            let _ = dr::stream::destroy(self.stream);
        }
    }
}

/// An instantiated CUDA graph (destroyed on drop).
/// An event recorded on the stream by [`Gpu::record`]; only this module touches the handle.
pub struct Event(sys::CUevent);

pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Drop for Graph {
    fn drop(&mut self) {
        unsafe {
            let _ = dr::graph::exec_destroy(self.exec);
            let _ = dr::graph::destroy(self.graph);
        }
    }
}
