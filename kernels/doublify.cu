// PyCUDA's hello world: double every element of a 4x4 float array in place.
extern "C" __global__ void doublify(float *a)
{
    int idx = threadIdx.x + threadIdx.y * 4;
    a[idx] *= 2;
}
