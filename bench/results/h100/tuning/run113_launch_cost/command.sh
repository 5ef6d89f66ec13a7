# Run 113: the host time of a cooperative launch against a plain one, and
# of the queries the held path makes (launch_cost.cu, built on the
# development machine into build_ab/launch_cost): grid run 110's call
# times of the norm backward rose by up to ~80 us where its kernel times
# rose by 3-8.
./build_ab/launch_cost | tee $OUT/launch_cost.txt
