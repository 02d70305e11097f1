! The `use mpi_f08` bindings, which reach MPI through other entry points than mpif.h's:
! a message each way between the sites of VARGR_MPI_SITES=blocks:2, one blocking and
! one completed by MPI_Wait, for 4 ranks.
program f08_check
  use mpi_f08
  implicit none
  integer, parameter :: n = 8192
  integer :: rank, far, i, count
  type(MPI_Status) :: status
  type(MPI_Request) :: req
  double precision :: a(n), b(n)

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  far = mod(rank + 2, 4)
  do i = 1, n
    a(i) = dble(mod(i * (rank + 1), 89))
  end do
  call MPI_Irecv(b, n, MPI_DOUBLE_PRECISION, far, 7, MPI_COMM_WORLD, req)
  call MPI_Send(a, n, MPI_DOUBLE_PRECISION, far, 7, MPI_COMM_WORLD)
  call MPI_Wait(req, status)
  call MPI_Get_count(status, MPI_DOUBLE_PRECISION, count)
  write (*, '(a,i0,a,f0.2,a,i0,a,i0)') 'rank ', rank, ': f08 ', sum(b), ' count ', count, &
    ' src ', status%MPI_SOURCE
  call MPI_Finalize()
end program f08_check
